// The VS Code extension: starts `lintloop server` through vscode-languageclient for Python files and
// notebooks, restarts it when its settings change, and probes the open file in a terminal.
import * as vscode from "vscode";
import { LanguageClient, LanguageClientOptions, ServerOptions } from "vscode-languageclient/node";

import { probeCommandLine, readSettings, serverExecutable, Settings } from "./client";

let client: LanguageClient | undefined;

function settings(): Settings {
  const configuration = vscode.workspace.getConfiguration("lintloop");
  return readSettings((key) => configuration.get(key));
}

function createClient(output: vscode.OutputChannel): LanguageClient {
  const server = serverExecutable(settings());
  const serverOptions: ServerOptions = { command: server.command, args: server.args };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: "file", language: "python" },
      { scheme: "untitled", language: "python" },
      { notebook: "jupyter-notebook", language: "python" },
    ],
    outputChannel: output,
  };
  return new LanguageClient("lintloop", "lintloop", serverOptions, clientOptions);
}

async function restart(output: vscode.OutputChannel): Promise<void> {
  if (client) {
    await client.stop();
  }
  client = createClient(output);
  await client.start();
}

export async function activate(context: vscode.ExtensionContext): Promise<LanguageClient | undefined> {
  const output = vscode.window.createOutputChannel("lintloop");
  context.subscriptions.push(
    output,
    vscode.commands.registerCommand("lintloop.restart", () => restart(output)),
    vscode.commands.registerCommand("lintloop.showOutput", () => output.show()),
    vscode.commands.registerCommand("lintloop.probeFile", () => {
      const document = vscode.window.activeTextEditor?.document;
      if (!document || document.uri.scheme !== "file") {
        void vscode.window.showWarningMessage("lintloop: open a saved Python file to probe it.");
        return;
      }
      const terminal = vscode.window.createTerminal("lintloop probe");
      terminal.show();
      terminal.sendText(probeCommandLine(settings(), document.uri.fsPath));
    }),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration("lintloop")) {
        void restart(output);
      }
    }),
  );
  try {
    await restart(output);
  } catch (error) {
    const server = serverExecutable(settings());
    void vscode.window.showErrorMessage(
      `lintloop: could not start \`${[server.command, ...server.args].join(" ")}\` (${error}). ` +
        "Install lintloop, or set `lintloop.path` or `lintloop.interpreter`.",
    );
  }
  return client;
}

export async function deactivate(): Promise<void> {
  if (client) {
    await client.stop();
    client = undefined;
  }
}
