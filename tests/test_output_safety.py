"""What lintloop prints and writes when a working tree is hostile (issue 36): control characters from a
file's text or name (ESC sequences that set a window's title or clear the screen, bidirectional
controls, undecodable bytes) are escaped in every format, with or without colour; a report is never
written through a symbolic link in the project; a report that cannot be written (a missing folder, a
folder, a full device) is one line and exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from lintloop.terminal import printable

LINTLOOP = [sys.executable, "-m", "lintloop"]
FORMATS = ("text", "concise", "json", "sarif", "github")
TITLE = "\x1b]0;owned\x07"  # sets a terminal's window title
CLEAR = "\x1b[2J\x1b[H"  # clears the screen
# Text no terminal should act on: C0, C1 (U+009B is CSI to some terminals), a bidirectional override.
HOSTILE_TEXT = f"{TITLE}{CLEAR}\x9b31m\u202e"


def hostile_tree(tmp_path: Path) -> Path:
    """A training script whose flagged line holds control characters, under a name that holds them too
    (and an undecodable byte: a Linux name is bytes)."""
    text = (FIXTURES / "LL301_bad.py").read_text()
    lines = text.splitlines(keepends=True)
    flagged = next(i for i, line in enumerate(lines) if line.strip() == "total_loss += loss")
    lines[flagged] = lines[flagged].rstrip("\n") + f"  # {HOSTILE_TEXT}\n"
    name = os.fsdecode(b"train\x1b[2J\xff\xe2\x80\xae.py")
    (tmp_path / name).write_text("".join(lines), encoding="utf-8")
    return tmp_path


def lintloop(*args: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*LINTLOOP, *args], cwd=cwd, capture_output=True, timeout=120, **kwargs)


def control_characters(data: bytes) -> list[str]:
    text = data.decode("utf-8", "surrogateescape")
    return sorted({repr(char) for char in text if printable(char) != char and char not in "\n"})


def test_printable_escapes_controls_bidi_and_undecodable_bytes_and_keeps_tabs():
    assert printable(f"a\tb{TITLE}") == "a\tb\\x1b]0;owned\\x07"
    assert printable("\x9b\x7f\u202e\u2066x\n") == "\\x9b\\x7f\\u202e\\u2066x\\x0a"
    assert printable(os.fsdecode(b"n\xff.py")) == "n\\xff.py"  # the byte a name holds
    assert printable("\ud800") == "\\ud800"  # a lone surrogate from a notebook's JSON
    assert printable("plain é ü 漢字 ✓") == "plain é ü 漢字 ✓"


@pytest.mark.parametrize("color", ["never", "always"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_no_control_character_of_a_file_reaches_the_output(tmp_path, fmt, color):
    tree = hostile_tree(tmp_path)
    run = lintloop("check", "--no-cache", "--select", "LL301", "--format", fmt, "--color", color, ".", cwd=tree)
    assert run.returncode == 1, run.stderr
    printed = run.stdout + run.stderr
    if color == "always" and fmt == "text":  # lintloop's own colour codes, and nothing else
        printed = printed.replace(b"\x1b[", b"").replace(b"\x1b", b"ESC")
        assert b"ESC]0;owned" not in printed and b"\x9b" not in printed
    else:
        assert control_characters(printed) == []
    shown = {"json": b"train\\u001b[2J", "sarif": b"train%1B%5B2J"}.get(fmt, b"train\\x1b[2J")
    assert shown in printed  # the name, escaped
    if fmt == "text":  # the flagged line too
        assert b"# \\x1b]0;owned\\x07\\x1b[2J\\x1b[H\\x9b31m\\u202e" in printed


def test_json_and_sarif_keep_the_text_and_the_name_recoverable(tmp_path):
    tree = hostile_tree(tmp_path)
    [name] = [p.name for p in tree.iterdir()]
    findings = json.loads(lintloop("check", "--no-cache", "--select", "LL301", "--format", "json", ".",
                                   cwd=tree).stdout)
    assert findings[0]["path"] == name  # JSON's escapes decode to the name, its undecodable byte included
    assert os.fsencode(findings[0]["path"]) == b"train\x1b[2J\xff\xe2\x80\xae.py"
    sarif = json.loads(lintloop("check", "--no-cache", "--select", "LL301", "--format", "sarif", ".",
                                cwd=tree).stdout)
    uri = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "train%1B%5B2J%FF%E2%80%AE.py"  # the name's bytes, percent-encoded


def test_messages_on_stderr_escape_names_too(tmp_path):
    tree = hostile_tree(tmp_path)
    run = lintloop("fix", "--diff", "--select", "LL301", "--unsafe-fixes", "--verbose", ".", cwd=tree)
    assert control_characters(run.stdout + run.stderr) == []
    assert b"train\\x1b[2J\\xff\\u202e.py" in run.stdout  # the diff's file names, escaped


# ----- where a report is written --------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "train.py").write_text((FIXTURES / "LL301_bad.py").read_text())
    (tmp_path / "outside.txt").write_text("keep me\n")
    return tmp_path / "project"


def test_a_report_is_not_written_through_a_link_in_the_project(project):
    (project / "report.json").symlink_to("../outside.txt")
    run = lintloop("check", "--no-cache", "--format", "json", "--output", "report.json", ".", cwd=project)
    assert run.returncode == 2
    assert run.stderr.decode() == ("lintloop: error: --output report.json: a symbolic link in the project (to "
                                   "../outside.txt), not followed: name the file itself\n")
    assert (project.parent / "outside.txt").read_text() == "keep me\n"


def test_a_link_the_user_names_outside_the_project_is_followed(project):
    run = lintloop("check", "--no-cache", "--format", "concise", "--output", "/dev/stdout", ".", cwd=project)
    assert run.returncode == 1 and b"LL301" in run.stdout


@pytest.mark.parametrize("output, message", [
    ("missing/report.json", "--output missing/report.json: no such folder: {project}/missing"),
    (".", "--output .: a folder, not a file"),
    ("/dev/full", "cannot write the report to /dev/full: No space left on device"),
])
def test_a_report_that_cannot_be_written_is_one_line_and_exit_2(project, output, message):
    run = lintloop("check", "--no-cache", "--output", output, ".", cwd=project)
    assert (run.returncode, run.stderr.decode()) == (2, f"lintloop: error: {message.format(project=project)}\n")


@pytest.mark.parametrize("args", [["check", "--no-cache", "."], ["check", "--no-cache", "--format", "json", "."],
                                  ["fix", "--diff", "--unsafe-fixes", "."], ["rules"], ["rule", "LL301"]])
def test_standard_output_on_a_full_device_is_one_line_and_exit_2(project, args):
    with open("/dev/full", "wb") as full:
        run = subprocess.run([*LINTLOOP, *args], cwd=project, stdout=full, stderr=subprocess.PIPE, timeout=120)
    assert run.returncode == 2
    assert run.stderr.decode().splitlines()[-1] in ("lintloop: error: cannot write to standard output: No space "
                                                    "left on device", "lintloop: error: cannot write the report "
                                                    "to standard output: No space left on device")
    assert b"Traceback" not in run.stderr


@pytest.mark.parametrize("redirect", ["missing folder", "full device", "link in the project"])
def test_the_probe_s_report_follows_the_same_rules(project, redirect):
    (project / "prog.py").write_text("print('ran')\n")
    (project / "report.txt").symlink_to("../outside.txt")
    output = {"missing folder": ["--output", "missing/r.txt"], "link in the project": ["--output", "report.txt"],
              "full device": []}[redirect]
    with open("/dev/full", "wb") if redirect == "full device" else open(os.devnull, "wb") as stdout:
        run = subprocess.run([*LINTLOOP, "probe", "prog.py", *output], cwd=project, stdout=stdout,
                             stderr=subprocess.PIPE, timeout=120)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(b"lintloop: error: ")
    assert (project.parent / "outside.txt").read_text() == "keep me\n"
