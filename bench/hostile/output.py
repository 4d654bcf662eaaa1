"""Terminal output: control characters in anything lintloop prints from a working tree — a file's text
(comments, strings, the line a finding shows, a syntax error's message), its name (escape sequences,
bidirectional controls, a newline, undecodable bytes), a suppression comment, a configuration's key, a
path named on the command line — in every format, command and colour choice. The harness fails a case
that prints any control character but newline and tab (with `--color always`: any but lintloop's own
SGR colour codes)."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

from harness import Case

CATEGORY = "output"
DESCRIPTION = "control characters from names, text, comments and configurations, in every format"

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
LEAK = (FIXTURES / "LL301_bad.py").read_text()
FORMATS = ("text", "concise", "json", "sarif", "github")
# What a terminal acts on: set the title, clear the screen, move the cursor, C1 CSI, a hyperlink, a
# right-to-left override, a bell, a backspace over the text before it, DEL.
CONTROLS = {
    "title": "\x1b]0;owned\x07", "clear": "\x1b[2J\x1b[H", "csi-c1": "\x9b2J", "hyperlink": "\x1b]8;;http://x\x1b\\",
    "bidi": "\u202e\u2066", "bell": "\x07", "backspace": "\x08\x08\x08", "del": "\x7f", "carriage-return": "\r",
}
# Name bytes: each kind above (a newline too), and bytes that are no UTF-8.
NAME_BYTES = {**{kind: text.encode("utf-8") for kind, text in CONTROLS.items() if kind != "carriage-return"},
              "newline": b"\n", "undecodable": b"\xff\xfe", "carriage-return": b"\r"}
_SGR = re.compile(rb"\x1b\[[0-9;]*m")  # lintloop's own colours


def _only_own_colours(outcome) -> str | None:
    rest = _SGR.sub(b"", outcome.stdout + outcome.stderr).decode("utf-8", "surrogateescape")
    bad = [char for char in rest if (ord(char) < 32 and char not in "\n\t") or 0x7f <= ord(char) <= 0x9f
           or 0x202a <= ord(char) <= 0x202e or 0x2066 <= ord(char) <= 0x2069 or 0xd800 <= ord(char) <= 0xdfff]
    return f"printed {sorted(set(bad))!r} besides its colours" if bad else None


def _leak_with(text: str) -> str:
    """The LL301 script with `text` in the flagged line's comment and in a string on the line before it."""
    lines = LEAK.splitlines(keepends=True)
    flagged = next(i for i, line in enumerate(lines) if line.strip() == "total_loss += loss")
    indent = lines[flagged][:len(lines[flagged]) - len(lines[flagged].lstrip())]
    lines[flagged] = lines[flagged].rstrip("\n") + f"  # {text}\n"
    lines.insert(flagged, f"{indent}note = {text!r}\n")
    return "".join(lines)


def cases(quick: bool) -> list[Case]:
    found = []
    colours = ("never", "always") if not quick else ("never",)
    # A file's text, every format and colour choice.
    for (kind, text), fmt, colour in itertools.product(CONTROLS.items(), FORMATS, colours):
        if quick and not (kind == "title" and fmt in ("text", "json", "github") or fmt == "text" and kind == "bidi"):
            continue
        argv = ["check", "--no-cache", "--select", "LL301", "--format", fmt, "--color", colour, "train.py"]
        found.append(Case(CATEGORY, f"text-{kind}-{fmt}-{colour}", {"project/train.py": _leak_with(text)}, argv,
                          exits=frozenset({1}), plain_output=colour == "never",
                          expect=_only_own_colours if colour == "always" else None))
    # A file's name: found in a folder and named, every format, and fix / fix --diff / --statistics.
    commands = {**{f"check-{fmt}": ["check", "--no-cache", "--select", "LL301", "--format", fmt, "."]
                   for fmt in FORMATS},
                "fix-diff": ["fix", "--diff", "--unsafe-fixes", "--select", "LL301", "."],
                "fix": ["fix", "--unsafe-fixes", "--select", "LL301", "--verbose", "."],
                "statistics": ["check", "--no-cache", "--statistics", "--select", "LL301", "."]}
    for (kind, raw), (command, argv) in itertools.product(NAME_BYTES.items(), commands.items()):
        if quick and (kind not in ("newline", "undecodable") or command not in ("check-text", "fix-diff")):
            continue
        name = os.fsdecode(b"sub" + raw + b"/train" + raw + b".py")
        found.append(Case(CATEGORY, f"name-{kind}-{command}", {f"project/{name}": LEAK}, argv,
                          exits=frozenset({0} if command == "fix" else {1}), writes=("project/sub*",)))
    # Messages that quote the text: a syntax error, an unknown code in a suppression, a configuration key,
    # a path named on the command line that does not exist, an unknown rule.
    title = CONTROLS["title"]
    quoted = {
        "syntax-error": ({"project/bad.py": f"import torch\nx = 1 {title} +\n"}, ["check", "bad.py"], {1}),
        "syntax-error-string": ({"project/bad.py": f"import torch\nx = '{title}\n"}, ["check", "bad.py"], {1}),
        "suppression": ({"project/train.py": LEAK.replace("total_loss += loss",
                                                          f"total_loss += loss  # lintloop: ignore[{title}]")},
                        ["check", "--extend-select", "LL002", "train.py"], {1}),
        "config-key": ({"project/pyproject.toml": f'[tool.lintloop]\n"{title}" = 1\n',
                        "project/train.py": LEAK}, ["check", "."], {2}),
        "config-value": ({"project/pyproject.toml": f'[tool.lintloop]\nselect = ["{title}"]\n',
                          "project/train.py": LEAK}, ["check", "."], {2}),
        "missing-path": ({}, ["check", f"missing{title}.py"], {2}),
        "unknown-rule": ({}, ["rule", f"LL{title}"], {2}),
        "notebook-cell": ({"project/nb.ipynb": _notebook(_leak_with(title))}, ["check", "nb.ipynb"], {1}),
        "notebook-name": ({f"project/nb{title}.ipynb": _notebook(LEAK)}, ["check", "."], {1}),
    }
    for name, (files, argv, exits) in quoted.items():
        if quick and name not in ("syntax-error", "suppression", "config-key", "notebook-name"):
            continue
        for fmt in ("text", "concise", "json") if not quick else ("text",):
            format_args = ["--format", fmt] if argv[0] == "check" else []
            found.append(Case(CATEGORY, f"quoted-{name}-{fmt}", files, [*argv[:1], *format_args, *argv[1:]],
                              exits=frozenset(exits)))
            if argv[0] != "check":
                break
    return found


def _notebook(source: str) -> str:
    import json

    cell = {"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [],
            "source": source.splitlines(keepends=True)}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
