"""Planted files: what a cloned repository or a pull request can put in the working tree to make lintloop
write, run or load what it must not — crash journals of `fix`, configurations that set the machine's
load, modules named like the ones lintloop imports, a cache folder that leads elsewhere. Nothing from the
tree is executed (a planted module writes a marker file outside the project: the invariants catch it),
no planted journal is applied, no run starts more workers than the machine has cores."""

from __future__ import annotations

import hashlib
import itertools
import os
from pathlib import Path

from harness import Case, Link

CATEGORY = "planted"
DESCRIPTION = "journals, configurations, modules and caches a repository can plant"

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
FIXABLE = (FIXTURES / "LL203_bad.py").read_bytes()
LEAK = (FIXTURES / "LL301_bad.py").read_text()
PLANTED_CODE = b"import os\nos.system('touch ../outside/PWNED')\n"
MARKER = "open(__import__('os').path.join({sandbox!r}, 'outside', 'PWNED'), 'w').close()\n"


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).hexdigest().encode()


def _journals(old: bytes, new: bytes, path: str) -> dict[str, bytes]:
    """Journals of a write of `new` over `old`, digests right, in the layouts lintloop has used."""
    version_1 = b"lintloop journal 1\nold %d %s\nnew %d %s\n" % (len(old), _digest(old), len(new), _digest(new))
    name = path.encode()
    version_2 = (b"lintloop journal 2\npath %d\n%s\nold %d %s\nnew %d %s\n"
                 % (len(name), name, len(old), _digest(old), len(new), _digest(new)))
    return {"v1": version_1 + old + new, "v2": version_2 + old + new}


def _not_planted(outcome) -> str | None:
    return "the planted journal's text was written into train.py" \
        if b"os.system" in outcome.written.get("project/train.py", b"") else None


def _journal_cases(quick: bool) -> list[Case]:
    found = []
    states = {  # what the planted journal says the file was, and what the file is now
        "file-is-old": lambda: (FIXABLE, FIXABLE),
        "file-between": lambda: (FIXABLE, PLANTED_CODE[:8] + FIXABLE[8:]),
        "file-is-new": lambda: (FIXABLE, PLANTED_CODE),
    }
    names = {"beside": ".train.py.lintloop-journal", "other-name": ".train.py.journal",
             "in-cache": ".lintloop_cache/journal/train"}
    commands = {"fix": ["fix", "--select", "LL203", "train.py"], "fix-walk": ["fix", "--select", "LL203", "."],
                "check": ["check", "--select", "LL203", "train.py"]}
    for (state, make), (where, name), (command, argv), layout in itertools.product(
            states.items(), names.items(), commands.items(), ("v1", "v2")):
        if quick and (where != "beside" or command == "check" or state != "file-between"):
            continue
        old, current = make()
        # The v2 journal names the file by its path in the sandbox, which the case does not know yet:
        # a plausible absolute path is as good as the real one for a planted file.
        journal = _journals(old, PLANTED_CODE, "/tmp/project/train.py")[layout]
        found.append(Case(CATEGORY, f"journal-{state}-{where}-{layout}-{command}",
                          {"project/train.py": current, f"project/{name}": journal}, argv,
                          exits=frozenset({0, 1, 2}), writes=("project/train.py",), expect=_not_planted))
    return found


def _config_cases(quick: bool) -> list[Case]:
    found = []
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    files = {f"project/pkg/m{i}.py": LEAK for i in range(24)}
    settings = {"jobs-64": "jobs = 64\n", "jobs-huge": f"jobs = {10**19}\n",
                "no-limits": "file-timeout = 0\nfile-memory-limit = 0\n",
                "all-of-it": "jobs = 1000\nfile-timeout = 0\nfile-memory-limit = 0\n"}
    for (name, text), (config, command) in itertools.product(
            settings.items(), itertools.product(("pyproject.toml", "lintloop.toml"), ("check", "fix"))):
        if quick and (config == "lintloop.toml" or command == "fix" or name not in ("jobs-64", "all-of-it")):
            continue
        body = f"[tool.lintloop]\n{text}" if config == "pyproject.toml" else text
        # The parent, its workers (at most one per core), and a moment's extra: a worker being replaced.
        found.append(Case(CATEGORY, f"config-{name}-{config}-{command}", {**files, f"project/{config}": body},
                          [command, "--no-cache", "."], exits=frozenset({1}), writes=("project/pkg/*",),
                          max_processes=cores + 2))
    found.append(Case(CATEGORY, "command-line-jobs-64", files, ["check", "--no-cache", "--jobs", "64", "."],
                      exits=frozenset({1}), max_processes=cores + 2))
    return found


def _module_cases(quick: bool) -> list[Case]:
    """Modules named like the standard library's and lintloop's dependencies, at the top of the project:
    each writes a marker outside the project if imported."""
    names = ["signal.py", "pathlib.py", "rich.py", "pathspec.py", "libcst/__init__.py", "multiprocessing/__init__.py",
             "json.py", "tomllib.py", "tomli.py", "astroid/__init__.py", "nbformat/__init__.py", "lsprotocol/__init__.py",
             "pygls/__init__.py", "sitecustomize.py", "usercustomize.py", "encodings/__init__.py", "typing_extensions.py"]
    found = []
    for script, command in itertools.product((False, True), ("check", "fix", "rules", "server")):
        if quick and (script, command) not in ((False, "check"), (True, "server")):
            continue
        argv = {"check": ["check", "--no-cache", "."], "fix": ["fix", "."], "rules": ["rules"],
                "server": ["server"]}[command]
        found.append(Case(CATEGORY, f"modules-{'script' if script else 'python-m'}-{command}",
                          {"project/train.py": LEAK}, argv, exits=frozenset({0, 1}), script=script,
                          writes=("project/train.py",), stdin=_server_session() if command == "server" else b"",
                          setup=_plant_modules(names), expect=_no_marker, timeout=90,
                          plain_output=command != "server"))  # the server speaks LSP: \r\n-framed
    return found


def _plant_modules(names: list[str]):
    def plant(sandbox: Path) -> None:
        for name in names:
            path = sandbox / "project" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(MARKER.format(sandbox=str(sandbox)))
    return plant


def _no_marker(outcome) -> str | None:
    return "a module planted in the project was imported" if "outside/PWNED" in outcome.changed else None


def _server_session() -> bytes:
    """An editor's session: initialize, open a training script (the server lints it in a worker), wait,
    shut down, exit."""
    import json

    def frame(message: dict) -> bytes:
        body = json.dumps(message).encode()
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    opened = {"textDocument": {"uri": "file:///tmp/train.py", "languageId": "python", "version": 1, "text": LEAK}}
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None, "capabilities": {}}},
                {"jsonrpc": "2.0", "method": "initialized", "params": {}},
                {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": opened},
                # A request the server answers only after the lint above started: hover needs the document.
                {"jsonrpc": "2.0", "id": 2, "method": "textDocument/hover",
                 "params": {"textDocument": {"uri": "file:///tmp/train.py"}, "position": {"line": 0, "character": 0}}},
                {"jsonrpc": "2.0", "id": 3, "method": "shutdown"}, {"jsonrpc": "2.0", "method": "exit"}]
    return b"".join(frame(message) for message in messages)


def _cache_cases(quick: bool) -> list[Case]:
    victim = {"outside/cache/keep.json": b'{"format": 4}'}
    layouts = {
        "cache-link": {"project/.lintloop_cache": Link("../outside/cache")},
        "cache-file": {"project/.lintloop_cache": b"not a folder"},
        "shard-link": {"project/.lintloop_cache/ab": Link("../../outside/cache")},
        "entry-link": {"project/.lintloop_cache/ab/" + "ab" * 32 + ".json": Link("../../../outside/cache/keep.json")},
        "forged-entry": {"project/.lintloop_cache/ab/" + "ab" * 32 + ".json":
                         b'{"format":4,"key":"' + b"ab" * 32 + b'","findings":[{"message":"\\u001b[2J"}]}'},
    }
    found = []
    for name, files in layouts.items():
        for command in (["check", "."], ["check", "--format", "json", "."]):
            if quick and (len(command) > 2 or name not in ("cache-link", "forged-entry")):
                continue
            found.append(Case(CATEGORY, f"{name}-{'-'.join(command[:-1])}",
                              {"project/train.py": LEAK, **victim, **files}, command, exits=frozenset({1})))
    return found


def cases(quick: bool) -> list[Case]:
    return _journal_cases(quick) + _config_cases(quick) + _module_cases(quick) + _cache_cases(quick)
