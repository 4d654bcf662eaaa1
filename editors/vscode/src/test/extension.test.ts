// The extension under node with a fake VS Code API (src/test/fakeVscode.ts): its client module starts a
// real `lintloop server` through vscode-languageclient, opens a file, and receives its diagnostics.
// Which lintloop: LINTLOOP_PYTHON (`python -m lintloop`), else `lintloop` on the PATH.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

import * as fake from "./fakeVscode";
import { lintloopExecutable, probeCommandLine, readSettings, serverExecutable, Settings } from "../client";

// Every `require("vscode")` of the extension and of vscode-languageclient gets the fake.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const Module = require("node:module");
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request: string, ...rest: unknown[]) {
  return request === "vscode" ? require.resolve("./fakeVscode") : resolve.call(this, request, ...rest);
};

const SETTINGS: Settings = { path: "", interpreter: "", args: [], probeCommand: "" };
const nowhere = (): undefined => undefined;

test("the configured executable wins, then lintloop on the PATH, then the interpreter's -m lintloop", () => {
  assert.deepEqual(lintloopExecutable({ ...SETTINGS, path: "/opt/ll", interpreter: "/py" }, () => "/bin/lintloop"),
    { command: "/opt/ll", args: [] });
  assert.deepEqual(lintloopExecutable({ ...SETTINGS, interpreter: "/py" }, () => "/bin/lintloop"),
    { command: "/bin/lintloop", args: [] });
  assert.deepEqual(lintloopExecutable({ ...SETTINGS, interpreter: "/venv/bin/python" }, nowhere),
    { command: "/venv/bin/python", args: ["-m", "lintloop"] });
  assert.deepEqual(serverExecutable({ ...SETTINGS, interpreter: "/py", args: ["--config", "ci.toml"] }, nowhere),
    { command: "/py", args: ["-m", "lintloop", "--config", "ci.toml", "server"] });
});

test("the probe command line quotes the file and honours lintloop.probe.command", () => {
  assert.equal(probeCommandLine({ ...SETTINGS, path: "/opt/ll" }, "/w/my train.py", nowhere), "/opt/ll probe '/w/my train.py'");
  assert.equal(probeCommandLine({ ...SETTINGS, probeCommand: ".venv/bin/python -m lintloop probe" }, "/w/it's.py", nowhere),
    ".venv/bin/python -m lintloop probe '/w/it'\\''s.py'");
});

test("settings of the wrong type are taken as their defaults", () => {
  const values: Record<string, unknown> = { path: 3, interpreter: " /py ", args: ["--config", 4, "x.toml"], "probe.command": null };
  assert.deepEqual(readSettings((key) => values[key]),
    { path: "", interpreter: "/py", args: ["--config", "x.toml"], probeCommand: "" });
});

test("activating starts lintloop server, and an opened file gets its findings as diagnostics", { timeout: 60_000 }, async () => {
  const python = process.env.LINTLOOP_PYTHON;
  fake.configure(python ? { "lintloop.interpreter": python } : {});
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "lintloop-vscode-"));
  const file = path.join(folder, "train.py");
  const text = [
    "import torch",
    "total_loss = 0",
    "for x, y in loader:",
    "    optimizer.zero_grad()",
    "    loss = criterion(model(x), y)",
    "    loss.backward()",
    "    optimizer.step()",
    "    total_loss += loss",
    "",
  ].join("\n");
  fs.writeFileSync(file, text);
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const extension = require("../extension");
  const context = { subscriptions: [] as { dispose(): unknown }[] };
  const client = await extension.activate(context);
  try {
    assert.ok(client, `the client did not start: ${fake.serverOutput.join("\n")}`);
    assert.ok(fake.commands.registered.has("lintloop.probeFile") && fake.commands.registered.has("lintloop.restart"));
    const document = fake.textDocument(file, text);
    const uri = document.uri.toString();
    const arrived = new Promise<void>((resolve) => {
      fake.publishedEvents.on("set", (which: string) => {
        if (which === uri && (fake.published.get(uri) ?? []).length > 0) {
          resolve();
        }
      });
    });
    fake.openDocument(document);
    await arrived;
    const [diagnostic] = fake.published.get(uri) ?? [];
    assert.match(diagnostic.message, /loss tensor `loss`/);
    assert.equal(typeof diagnostic.code === "object" ? (diagnostic.code as { value: string }).value : diagnostic.code, "LL301");
    assert.equal(diagnostic.range.start.line, 7);

    // The probe command runs in a terminal, on the open file.
    fake.window.activeTextEditor = { document };
    await fake.commands.registered.get("lintloop.probeFile")!();
    assert.match(fake.window.terminals.at(-1)!.sent[0], /probe .*train\.py$/);
  } finally {
    await extension.deactivate();
    context.subscriptions.forEach((item) => item.dispose());
    fs.rmSync(folder, { recursive: true, force: true });
  }
});
