"""What the probe reports of the files a program changed (issue 36, item 11): exactly what stands changed
after the run -- created, deleted, modified, replaced, renamed, at their real paths -- never a path that was
only named (a failed call, a file that never existed), however the change was made (Python, a shell
command), for odd names, links, and more changes than a report can list.

Most tests compare listings around changes made in the test itself (``changes.py``, no process); the
others run plain-Python programs under the probe.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lintloop.runtime_probe import changes
from lintloop.runtime_probe.changes import Listing, file_changes
from lintloop.runtime_probe.runner import run_probe

LINTLOOP = [sys.executable, "-m", "lintloop"]


def _changed(folder: Path, change, events: list[dict] | None = None) -> list[tuple]:
    """The changes `change()` makes in `folder`: (change, path relative to it, kind, and for a rename its
    destination, for a folder's change the entries counted in it)."""
    before = Listing.take(str(folder))
    change()
    found = file_changes(before, Listing.take(str(folder)), events or [], str(folder))
    return [(c.change, os.path.relpath(c.path, folder), c.kind, *([os.path.relpath(c.to, folder)] if c.to else []),
             *([c.entries] if c.entries else [])) for c in found.changes]


def _tree(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def test_a_deleted_tree_is_one_change_and_a_missing_file_none(tmp_path: Path) -> None:
    _tree(tmp_path, {"data/a.txt": "a", "data/sub/b.txt": "b", "data/sub/c.txt": "c", "keep.txt": "k"})

    def change() -> None:
        shutil.rmtree(tmp_path / "data")
        (tmp_path / "never.txt").unlink(missing_ok=True)

    assert _changed(tmp_path, change) == [("deleted", "data", "directory", 4)]


def test_renames_of_files_and_folders(tmp_path: Path) -> None:
    _tree(tmp_path, {"a.txt": "a", "over.txt": "old", "target.txt": "t", "dir/x.txt": "x", "dir/y/z.txt": "z"})

    def change() -> None:
        os.rename(tmp_path / "a.txt", tmp_path / "b.txt")
        os.replace(tmp_path / "over.txt", tmp_path / "target.txt")  # onto a file: it is gone
        os.rename(tmp_path / "dir", tmp_path / "moved")

    found = _changed(tmp_path, change)
    assert found == [("renamed", "a.txt", "file", "b.txt"), ("renamed", "dir", "directory", "moved", 3),
                     ("renamed", "over.txt", "file", "target.txt")]


def test_a_new_entry_on_a_freed_inode_is_no_rename(tmp_path: Path) -> None:
    """A file or folder deleted and another made at once often gets the freed inode: not a rename."""
    _tree(tmp_path, {"old/f.txt": "f", "gone.txt": "g"})

    def change() -> None:
        shutil.rmtree(tmp_path / "old")
        (tmp_path / "new").mkdir()
        os.remove(tmp_path / "gone.txt")
        (tmp_path / "made.txt").write_text("g")

    assert _changed(tmp_path, change) == [("deleted", "gone.txt", "file"), ("created", "made.txt", "file"),
                                          ("created", "new", "directory"), ("deleted", "old", "directory", 1)]


def test_links_kinds_and_contents(tmp_path: Path) -> None:
    _tree(tmp_path, {"file_then_dir": "f", "dir_then_file/x": "x", "grows.txt": "a", "mode.txt": "m", "t1": "",
                     "t2": ""})
    os.symlink("t1", tmp_path / "link")

    def change() -> None:
        os.remove(tmp_path / "file_then_dir")
        (tmp_path / "file_then_dir").mkdir()
        shutil.rmtree(tmp_path / "dir_then_file")
        (tmp_path / "dir_then_file").write_text("now a file")
        with open(tmp_path / "grows.txt", "a") as fh:
            fh.write("b")
        os.chmod(tmp_path / "mode.txt", 0o600)
        os.remove(tmp_path / "link")
        os.symlink("t2", tmp_path / "link")  # the same name, another target
        os.symlink("/nowhere", tmp_path / "dangling")

    found = _changed(tmp_path, change)
    assert found == [("created", "dangling", "symlink"), ("replaced", "dir_then_file", "file", 1),
                     ("replaced", "file_then_dir", "directory"),
                     ("modified", "grows.txt", "file"), ("modified", "link", "symlink"),
                     ("modified", "mode.txt", "file")]


def test_what_a_folder_that_cannot_be_listed_holds_is_not_judged(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """(Root reads every folder: the one that cannot be read is made so by the test.)"""
    _tree(tmp_path, {"closed/a.txt": "a", "open/b.txt": "b"})
    before = Listing.take(str(tmp_path))
    (tmp_path / "closed" / "new.txt").write_text("n")  # unseen: after the run, `closed` cannot be listed
    os.remove(tmp_path / "open" / "b.txt")
    scandir = os.scandir

    def closed(path):
        if str(path).endswith("closed"):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", closed)
    after = Listing.take(str(tmp_path))
    found = file_changes(before, after, [], str(tmp_path))
    assert [(c.change, os.path.relpath(c.path, tmp_path)) for c in found.changes] == [("deleted", "open/b.txt")]


def test_tools_state_is_not_listed(tmp_path: Path) -> None:
    _tree(tmp_path, {".git/HEAD": "ref", ".venv/pyvenv.cfg": "home", "pkg/__pycache__/m.pyc": "", "pkg/m.py": ""})

    def change() -> None:
        (tmp_path / ".git" / "HEAD").write_text("other")
        (tmp_path / ".venv" / "lib.py").write_text("")
        (tmp_path / "pkg" / "__pycache__" / "n.pyc").write_text("")

    assert _changed(tmp_path, change) == []


def test_more_changes_than_kept_are_counted(tmp_path: Path) -> None:
    def change() -> None:
        for number in range(changes.CHANGES_KEPT + 200):
            (tmp_path / f"f{number:05}").write_text("")
        (tmp_path / "many").mkdir()
        for number in range(3000):
            (tmp_path / "many" / f"g{number}").write_text("")

    before = Listing.take(str(tmp_path))
    change()
    found = file_changes(before, Listing.take(str(tmp_path)), [], str(tmp_path))
    assert found.total == changes.CHANGES_KEPT + 201 and len(found.changes) == changes.CHANGES_KEPT
    assert [c.path for c in found.changes] == sorted(c.path for c in found.changes)


def test_a_folder_of_too_many_entries_is_not_listed(tmp_path: Path) -> None:
    (tmp_path / "big").mkdir()
    for number in range(changes.LISTED_MAX + 1):
        (tmp_path / "big" / str(number)).touch()
    assert Listing.take(str(tmp_path)) is None
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    try:
        event = {"type": "file", "action": "write", "path": str(outside), "before": None, "file": "p.py", "line": 3,
                 "pid": 7}
        missing = {"type": "file", "action": "remove", "path": str(tmp_path / "missing"), "before": None}
        outside.write_text("written")
        found = file_changes(None, None, [event, missing], str(tmp_path))
    finally:
        outside.unlink()
    assert not found.listed
    assert [c.to_json() for c in found.changes] == [{"change": "created", "path": str(outside), "kind": "file",
                                                     "file": "p.py", "line": 3, "pid": 7}]


def _write(directory: Path, name: str, source: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


# The program: it deletes in its working folder, names files that never existed, fails calls.
_DELETER = """
    import os, pathlib, shutil, subprocess, sys
    shutil.rmtree("data")
    for gone in ("missing.txt", "data/also-missing.txt"):
        try:
            os.remove(gone)
        except FileNotFoundError:
            pass
    pathlib.Path("never.txt").unlink(missing_ok=True)
    try:
        open("no-such-folder/x.txt", "w")
    except OSError:
        pass
    os.rename("keep.txt", "kept.txt")
    subprocess.run(["sh", "-c", "rm shell-victim.txt; echo > by-shell.txt"], check=True)
    with open(sys.argv[1], "w") as fh:  # outside the working folder
        fh.write("x")
    with open("link-out", "a") as fh:  # through a link, to the file it names
        fh.write("more")
    with open("scratch.tmp", "w") as fh:  # written and removed: no change
        fh.write("x")
    os.remove("scratch.tmp")
"""


def test_a_program_that_deletes_files_gets_exactly_what_happened(tmp_path: Path) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    _tree(work, {"data/a.txt": "a", "data/sub/b.txt": "b", "keep.txt": "k", "shell-victim.txt": "v"})
    _tree(outside, {"linked.txt": "l"})
    os.symlink(outside / "linked.txt", work / "link-out")
    script = _write(tmp_path, "deleter.py", _DELETER)
    run = run_probe(script, [str(outside / "new.txt")], cwd=work, timeout=30)
    assert run.returncode == 0, run.stderr_tail
    found = [(c["change"], os.path.relpath(c["path"], tmp_path), c.get("to") and os.path.relpath(c["to"], tmp_path),
              c.get("entries"), c.get("line")) for c in run.files()]
    assert found == [("modified", "outside/linked.txt", None, None, 17),
                     ("created", "outside/new.txt", None, None, 15),
                     ("created", "work/by-shell.txt", None, None, None),  # (a shell's: no line of Python)
                     ("deleted", "work/data", None, 3, 2),
                     ("renamed", "work/keep.txt", "work/kept.txt", None, 13),
                     ("deleted", "work/shell-victim.txt", None, None, None)]
    assert run.file_changes is not None and run.file_changes.listed and run.file_changes.total == 6


def test_odd_names_are_reported_as_they_are_and_printed_escaped(tmp_path: Path) -> None:
    """Names with a terminal escape, a newline, a bidirectional override and a byte that is no UTF-8."""
    script = _write(tmp_path, "names.py", """
        import os
        names = b"title\\x1b]0;owned\\x07.txt", b"two\\nlines.txt", b"\\xe2\\x80\\xaereversed.txt", b"latin\\xff.txt"
        for name in names:
            os.close(os.open(name, os.O_CREAT | os.O_WRONLY))
        print("\\x1b[2J cleared?", flush=True)
        raise SystemExit("\\x1b[31mred\\x1b[0m")
    """)
    text_run, json_run = tmp_path / "text", tmp_path / "json"
    text_run.mkdir()
    json_run.mkdir()
    result = subprocess.run([*LINTLOOP, "probe", str(script)], cwd=text_run, capture_output=True, timeout=60)
    text = result.stdout.decode("utf-8")
    assert re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", text) is None, text
    assert ("files (created): latin\\xff.txt, title\\x1b]0;owned\\x07.txt, two\\x0alines.txt, "
            "\\u202ereversed.txt") in text, text
    assert "    \\x1b[31mred\\x1b[0m" in text  # the program's stderr
    data = json.loads(subprocess.run([*LINTLOOP, "probe", str(script), "--format", "json"], cwd=json_run,
                                     capture_output=True, timeout=60).stdout)
    assert [os.path.basename(c["path"]) for c in data["files"]] == [
        "latin\udcff.txt", "title\x1b]0;owned\x07.txt", "two\nlines.txt", "\u202ereversed.txt"]
