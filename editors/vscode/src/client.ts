// What the extension runs, decided from its settings alone (no VS Code API here: tested under plain node).
import * as fs from "fs";
import * as path from "path";

export interface Settings {
  /** The `lintloop` executable; empty: found on the PATH, else `interpreter -m lintloop`. */
  path: string;
  /** The Python that runs `-m lintloop` when no executable is set or found. */
  interpreter: string;
  /** Options given to lintloop before the `server` command (`--config FILE`). */
  args: string[];
  /** The command line `lintloop: Probe this file` runs, the file appended; empty: `<lintloop> probe`. */
  probeCommand: string;
}

export interface Executable {
  command: string;
  args: string[];
}

/** The first `name` on the PATH that is an executable file (with PATHEXT's suffixes on Windows). */
export function findOnPath(name: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const suffixes = process.platform === "win32" ? (env.PATHEXT ?? ".EXE;.CMD;.BAT").split(";") : [""];
  for (const folder of (env.PATH ?? "").split(path.delimiter)) {
    if (!folder) {
      continue; // an empty entry is the working directory, which is the user's project, not a tool
    }
    for (const suffix of suffixes) {
      const candidate = path.join(folder, name + suffix);
      try {
        fs.accessSync(candidate, fs.constants.X_OK);
        if (fs.statSync(candidate).isFile()) {
          return candidate;
        }
      } catch {
        // not here
      }
    }
  }
  return undefined;
}

/** How lintloop is started: the configured executable, the one on the PATH, or `python -m lintloop`. */
export function lintloopExecutable(settings: Settings, which: (name: string) => string | undefined = findOnPath): Executable {
  if (settings.path) {
    return { command: settings.path, args: [] };
  }
  const onPath = which("lintloop");
  if (onPath) {
    return { command: onPath, args: [] };
  }
  if (settings.interpreter) {
    return { command: settings.interpreter, args: ["-m", "lintloop"] };
  }
  // Not found: spawning it fails, and the client reports that lintloop could not be started.
  return { command: "lintloop", args: [] };
}

/** The language server's command: lintloop with the configured options, then `server`. */
export function serverExecutable(settings: Settings, which?: (name: string) => string | undefined): Executable {
  const lintloop = lintloopExecutable(settings, which);
  return { command: lintloop.command, args: [...lintloop.args, ...settings.args, "server"] };
}

/** A word as a POSIX shell reads it back unchanged. */
export function shellQuote(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** The command line that probes `file` in a terminal. */
export function probeCommandLine(settings: Settings, file: string, which?: (name: string) => string | undefined): string {
  if (settings.probeCommand) {
    return `${settings.probeCommand} ${shellQuote(file)}`;
  }
  const lintloop = lintloopExecutable(settings, which);
  return [lintloop.command, ...lintloop.args, ...settings.args, "probe", file].map(shellQuote).join(" ");
}

/** The settings as VS Code's configuration holds them, each of the wrong type taken as its default. */
export function readSettings(get: (key: string) => unknown): Settings {
  const text = (key: string): string => {
    const value = get(key);
    return typeof value === "string" ? value.trim() : "";
  };
  const args = get("args");
  return {
    path: text("path"),
    interpreter: text("interpreter"),
    args: Array.isArray(args) ? args.filter((a): a is string => typeof a === "string") : [],
    probeCommand: text("probe.command"),
  };
}
