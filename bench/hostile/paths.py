"""Paths and links: what a working tree's links, hard links, odd names and special files can make
`check` and `fix` read or write. Every fixable file outside the project must come out unchanged,
whatever in the project points at it, however lintloop was asked (a folder walk, a named file, pre-commit's
list); a fixable file inside the project is fixed where it lies."""

from __future__ import annotations

import itertools
from pathlib import Path

from harness import Case, HardLink, Link

CATEGORY = "paths"
DESCRIPTION = "links, hard links, odd names and special files in the working tree"

FIXABLE = (Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "LL203_bad.py").read_text()
SELECT = ["--select", "LL203"]  # a safe fix: `@tf.function` added to the training step

# Where a fixable file outside the project is reached from inside it: (name, files). A folder walk does
# not enter a linked folder (as git does not), so it finds nothing there.
_FOLDER_LINKS = ("folder-link", "nested-folder-link")
_REACHES = {
    "file-link": {"project/train.py": Link("../outside/victim.py")},
    "absolute-file-link": {"project/train.py": Link("{sandbox}/outside/victim.py")},
    "link-chain": {"project/a.py": Link("b.py"), "project/b.py": Link("../outside/victim.py")},
    "folder-link": {"project/pkg": Link("../outside")},
    "nested-folder-link": {"project/src/models": Link("../../outside")},
    "link-in-subfolder": {"project/src/train.py": Link("../../outside/victim.py")},
    "hard-link": {"project/train.py": HardLink("outside/victim.py")},
    "link-to-link-outside": {"project/train.py": Link("../outside/alias.py"),
                             "outside/alias.py": Link("victim.py")},
}
_COMMANDS = {
    "fix-walk": ["fix", "--no-cache", *SELECT, "."],
    "fix-unsafe": ["fix", "--unsafe-fixes", *SELECT, "."],
    "fix-named": None,  # each of the case's project files named, as pre-commit passes them
    "fix-diff": ["fix", "--diff", *SELECT, "."],
    "check": ["check", *SELECT, "."],
}


def _named(files: dict) -> list[str]:
    return ["fix", *SELECT, *sorted(path.removeprefix("project/") for path in files if path.startswith("project/"))]


def cases(quick: bool) -> list[Case]:
    found = []
    commands = _COMMANDS if not quick else {k: _COMMANDS[k] for k in ("fix-walk", "fix-named")}
    reaches = _REACHES if not quick else {k: _REACHES[k] for k in ("file-link", "link-chain", "hard-link")}
    for (reach, links), (command, argv) in itertools.product(reaches.items(), commands.items()):
        files = {"outside/victim.py": FIXABLE, **links}
        argv = argv or _named(links)
        # The file is linted, not rewritten: exit 1, the finding stays.
        walked_past = reach in _FOLDER_LINKS and argv[-1] == "."
        found.append(Case(CATEGORY, f"{reach}-{command}", files, argv, exits=frozenset({0 if walked_past else 1}),
                          expect=None if walked_past or command != "fix-walk" else _says_not_fixed))
    # A fixable file inside the project, reached through a link that stays inside: fixed where it lies.
    inside = {"project/real/train.py": FIXABLE, "project/train.py": Link("real/train.py")}
    found.append(Case(CATEGORY, "link-inside-project-fix", inside, ["fix", *SELECT, "train.py"], exits=frozenset({0}),
                      writes=("project/real/train.py",)))
    special = {
        "dev-zero-link": {"project/zero.py": Link("/dev/zero")},
        "fifo": {},
        "link-loop": {"project/a.py": Link("b.py"), "project/b.py": Link("a.py")},
        "dangling": {"project/gone.py": Link("nowhere.py")},
        "root-link": {"project/root": Link("/")},
    }
    for name, files in special.items():
        setup = _make_fifo if name == "fifo" else None
        for command in ("check", "fix"):
            if quick and (name, command) not in (("fifo", "fix"), ("dev-zero-link", "check")):
                continue
            found.append(Case(CATEGORY, f"{name}-{command}", {"project/ok.py": "import torch\n", **files},
                              [command, "--no-cache", "."], exits=frozenset({0, 1, 2}), setup=setup, timeout=60))
    return found


def _says_not_fixed(outcome) -> str | None:
    if "not fixed" not in outcome.err or "--write-outside-project" not in outcome.err:
        return "no message says the file was not fixed, nor how to fix it there: " + outcome.err[-300:]
    return None


def _make_fifo(sandbox: Path) -> None:
    import os

    os.mkfifo(sandbox / "project" / "pipe.py")
