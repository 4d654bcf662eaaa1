// Just enough of the VS Code API for vscode-languageclient to start the server, open a document and
// deliver its diagnostics, under plain node: the VS Code test runner downloads VS Code, which this
// machine's network does not reach. What the extension and the client ask of VS Code is recorded.
import { EventEmitter as NodeEmitter } from "events";
import * as path from "path";
import { pathToFileURL, fileURLToPath } from "url";

type Listener<T> = (event: T) => unknown;

export class EventEmitter<T> {
  private listeners: Listener<T>[] = [];
  event = (listener: Listener<T>): { dispose(): void } => {
    this.listeners.push(listener);
    return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
  };
  fire(event: T): void {
    for (const listener of [...this.listeners]) {
      listener(event);
    }
  }
  dispose(): void {
    this.listeners = [];
  }
}

export class Disposable {
  constructor(private readonly callOnDispose: () => void = () => undefined) {}
  static from(...items: { dispose(): unknown }[]): Disposable {
    return new Disposable(() => items.forEach((item) => item.dispose()));
  }
  dispose(): void {
    this.callOnDispose();
  }
}

export class Uri {
  private constructor(readonly scheme: string, readonly path: string, readonly text: string) {}
  static parse(text: string): Uri {
    const scheme = text.slice(0, text.indexOf(":"));
    return new Uri(scheme, scheme === "file" ? fileURLToPath(text) : text.slice(scheme.length + 1), text);
  }
  static file(fsPath: string): Uri {
    return new Uri("file", path.resolve(fsPath), pathToFileURL(path.resolve(fsPath)).href);
  }
  get fsPath(): string {
    return this.path;
  }
  get authority(): string {
    return "";
  }
  get query(): string {
    return "";
  }
  get fragment(): string {
    return "";
  }
  with(): Uri {
    return this;
  }
  toString(): string {
    return this.text;
  }
  toJSON(): string {
    return this.text;
  }
}

export class Position {
  constructor(readonly line: number, readonly character: number) {}
}

export class Range {
  readonly start: Position;
  readonly end: Position;
  constructor(a: Position | number, b: Position | number, c?: number, d?: number) {
    this.start = typeof a === "number" ? new Position(a, b as number) : a;
    this.end = typeof a === "number" ? new Position(c as number, d as number) : (b as Position);
  }
}

export class Diagnostic {
  code?: unknown;
  source?: string;
  tags?: unknown[];
  relatedInformation?: unknown[];
  data?: unknown;
  constructor(readonly range: Range, readonly message: string, readonly severity?: number) {}
}

export class CancellationTokenSource {
  private readonly cancelled = new EventEmitter<void>();
  readonly token = { isCancellationRequested: false, onCancellationRequested: this.cancelled.event };
  cancel(): void {
    this.token.isCancellationRequested = true;
    this.cancelled.fire();
  }
  dispose(): void {}
}

export class CodeActionKind {
  static readonly Empty = new CodeActionKind("");
  static readonly QuickFix = new CodeActionKind("quickfix");
  static readonly Source = new CodeActionKind("source");
  static readonly SourceFixAll = new CodeActionKind("source.fixAll");
  constructor(readonly value: string) {}
  append(part: string): CodeActionKind {
    return new CodeActionKind(this.value ? `${this.value}.${part}` : part);
  }
}

export const DiagnosticSeverity = { Error: 0, Warning: 1, Information: 2, Hint: 3 };

/** Every diagnostic the client set, by document URI. */
export const published = new Map<string, Diagnostic[]>();
export const publishedEvents = new NodeEmitter();

class DiagnosticCollection {
  constructor(readonly name: string) {}
  set(uri: Uri | [Uri, Diagnostic[]][], diagnostics?: Diagnostic[]): void {
    const entries: [Uri, Diagnostic[] | undefined][] = Array.isArray(uri) ? uri : [[uri, diagnostics]];
    for (const [one, list] of entries) {
      published.set(one.toString(), list ?? []);
      publishedEvents.emit("set", one.toString());
    }
  }
  delete(uri: Uri): void {
    published.delete(uri.toString());
  }
  clear(): void {
    published.clear();
  }
  forEach(): void {}
  get(uri: Uri): Diagnostic[] | undefined {
    return published.get(uri.toString());
  }
  has(uri: Uri): boolean {
    return published.has(uri.toString());
  }
  dispose(): void {}
}

export interface FakeDocument {
  uri: Uri;
  fileName: string;
  languageId: string;
  version: number;
  isClosed: boolean;
  isUntitled: boolean;
  lineCount: number;
  getText(): string;
}

export function textDocument(fsPath: string, text: string): FakeDocument {
  return {
    uri: Uri.file(fsPath),
    fileName: fsPath,
    languageId: "python",
    version: 1,
    isClosed: false,
    isUntitled: false,
    lineCount: text.split("\n").length,
    getText: () => text,
  };
}

const configuration: Record<string, unknown> = {};
export function configure(values: Record<string, unknown>): void {
  Object.assign(configuration, values);
}

export const commands = lenient({
  registered: new Map<string, (...args: unknown[]) => unknown>(),
  registerCommand(name: string, run: (...args: unknown[]) => unknown): Disposable {
    this.registered.set(name, run);
    return new Disposable(() => this.registered.delete(name));
  },
  executeCommand: async (): Promise<undefined> => undefined,
});

const openEvents = new EventEmitter<FakeDocument>();
export const openedDocuments: FakeDocument[] = [];
export function openDocument(document: FakeDocument): void {
  openedDocuments.push(document);
  openEvents.fire(document);
}

const none = (): Disposable => new Disposable();

/** `api` with every other `onDid...` event and `register...` call the client makes answered by a no-op. */
function lenient<T extends object>(api: T): T {
  return new Proxy(api, {
    get(target, name) {
      if (typeof name === "string" && !(name in target) && /^(on[A-Z]|register)/.test(name)) {
        return none;
      }
      return (target as Record<string | symbol, unknown>)[name];
    },
  });
}
const outputLines: string[] = [];
export const serverOutput = outputLines;

export const workspace = lenient({
  get textDocuments(): FakeDocument[] {
    return openedDocuments;
  },
  notebookDocuments: [],
  workspaceFolders: undefined,
  getConfiguration: (section?: string) => ({
    get: (key: string, fallback?: unknown) => configuration[section ? `${section}.${key}` : key] ?? fallback,
    has: (key: string) => `${section}.${key}` in configuration,
  }),
  onDidOpenTextDocument: openEvents.event,
  onDidCloseTextDocument: none,
  onDidChangeTextDocument: none,
  onDidSaveTextDocument: none,
  onWillSaveTextDocument: none,
  onDidChangeConfiguration: none,
  onDidChangeWorkspaceFolders: none,
  onDidCreateFiles: none,
  onDidRenameFiles: none,
  onDidDeleteFiles: none,
  onWillCreateFiles: none,
  onWillRenameFiles: none,
  onWillDeleteFiles: none,
  onDidOpenNotebookDocument: none,
  onDidChangeNotebookDocument: none,
  onDidSaveNotebookDocument: none,
  onDidCloseNotebookDocument: none,
  createFileSystemWatcher: () => ({ onDidCreate: none, onDidChange: none, onDidDelete: none, dispose() {} }),
  getWorkspaceFolder: () => undefined,
});

export const languages = lenient({
  createDiagnosticCollection: (name: string) => new DiagnosticCollection(name),
  match: (selector: unknown, document: FakeDocument): number => {
    const selectors = Array.isArray(selector) ? selector : [selector];
    return selectors.some((s) => typeof s === "object" && s !== null && (s as { language?: string }).language === document.languageId
      && ((s as { scheme?: string }).scheme ?? document.uri.scheme) === document.uri.scheme) ? 10 : 0;
  },
});

const channel = (name: string) => ({
  name,
  append: (text: string) => outputLines.push(text),
  appendLine: (text: string) => outputLines.push(text),
  replace: () => undefined,
  clear: () => undefined,
  show: () => undefined,
  hide: () => undefined,
  dispose: () => undefined,
});

export const window = lenient({
  activeTextEditor: undefined as { document: FakeDocument } | undefined,
  visibleTextEditors: [],
  createOutputChannel: channel,
  showErrorMessage: async (message: string) => {
    outputLines.push(`error: ${message}`);
    return undefined;
  },
  showWarningMessage: async (message: string) => {
    outputLines.push(`warning: ${message}`);
    return undefined;
  },
  showInformationMessage: async () => undefined,
  terminals: [] as { name: string; sent: string[] }[],
  createTerminal(name: string) {
    const terminal = { name, sent: [] as string[], show: () => undefined, sendText(text: string) { this.sent.push(text); } };
    this.terminals.push(terminal);
    return terminal;
  },
});

export const env = { language: "en", appName: "fake VS Code", machineId: "test", uriScheme: "vscode" };
export const version = "1.82.0";
export const extensions = { getExtension: () => undefined, all: [] };

// The rest of the API the client touches (classes it extends, enums it reads): a class per
// capitalised name (its enum members undefined, as the client only passes them through), nothing else.
const generic = new Map<string, unknown>();
module.exports = new Proxy(module.exports, {
  get(target, name) {
    if (name in target || typeof name !== "string" || !/^[A-Z]/.test(name)) {
      return target[name];
    }
    if (!generic.has(name)) {
      generic.set(name, class {
        constructor(...args: unknown[]) {
          Object.assign(this, { args });
        }
      });
    }
    return generic.get(name);
  },
});
