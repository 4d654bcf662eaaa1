"""`fix` writes a file in place (issue 22, item 5): the same inode, so hard links, open descriptors and a
process appending to the file see the new text and lose nothing; mode, owner and extended attributes
kept. Crash-safe through a journal in the user's private cache folder (never in the working tree: one
planted there is never read): a writer killed at any step leaves the old text,
the new one, or a mix of the two that the next `fix` finishes; a journal that does not match the
file (edited since the crash) is left, with the file, and named in one message.

Crashes are real ones at chosen steps: `write_in_place` runs in a forked child that dies there
(`os._exit`: no clean-up runs, as under SIGKILL). The kill test at random instants, and the
permission cases, are in tests/test_fs_faults.py.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import lintloop.source as source
from lintloop.linter import fix_text
from lintloop.runner import run_job
from lintloop.source import fcntl, journal_path, settled_for_reading, write_in_place
from test_fs_faults import FIXED, NOBODY, ORIGINAL, RULESET, SELECT, fix_job, journal_of, leftovers
from test_fs_faults import private_user_cache  # noqa: F401 - the autouse fixture, for this module's tests too

pytestmark = pytest.mark.skipif(fcntl is None or not hasattr(os, "fork"), reason="POSIX: flock, fork")

SHORTER = ORIGINAL.replace(ORIGINAL.splitlines(keepends=True)[2], b"", 1)  # a write that shrinks the file
DIED = 137  # the exit status of a child that died at its crash point
LINES = [b"# appended line %02d\n" % number for number in range(50)]
# Appends LINES with pauses of a few milliseconds and, when told to, now and then one long enough for
# a `fix` to read, fix and write the file in between; or stops half-way until a line comes on stdin.
APPENDER = """
import random, sys, time
path, seed, long_pauses, wait_half_way = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
rng = random.Random(seed)
with open(path, "ab", buffering=0) as log:  # one descriptor, held throughout, as a logger holds it
    for number in range(50):
        if wait_half_way and number == 25:
            print("waiting", flush=True)
            sys.stdin.readline()
        log.write(b"# appended line %02d\\n" % number)
        time.sleep(rng.uniform(0.08, 0.2) if long_pauses and rng.random() < 0.1 else rng.uniform(0, 0.005))
"""


def fixed(text: bytes) -> bytes:
    return fix_text("a.py", text.decode(), RULESET, False).text.encode()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """A fixable file, alone in its directory."""
    path = tmp_path / "a.py"
    path.write_bytes(ORIGINAL)
    return path


# --- the same file: hard links, open descriptors, attributes, appending processes --------------------


def test_fix_keeps_the_inode_so_hard_links_and_open_readers_see_the_fix(tmp_path, path, run_cli):
    (tmp_path / "elsewhere").mkdir()
    alias = tmp_path / "elsewhere" / "alias.py"
    os.link(path, alias)
    inode = path.stat().st_ino
    # A file with other names (which could lie outside the project) is rewritten only when asked.
    code, _, err = run_cli("fix", "--select", SELECT, path)
    assert code == 1 and path.read_bytes() == ORIGINAL
    assert err.splitlines()[0] == (f"lintloop: {path}: not fixed: it has 1 other name (hard links), which may lie "
                                   "outside the project; `--write-outside-project` fixes it there")
    with open(path, "rb") as reader:  # opened before the fix
        code, _, err = run_cli("fix", "--select", SELECT, "--write-outside-project", path)
        assert (code, err) == (0, "Fixed 1 finding in 1 file.\n")
        assert reader.read() == FIXED
        assert os.fstat(reader.fileno()).st_ino == inode
    assert path.stat().st_ino == alias.stat().st_ino == inode and path.stat().st_nlink == 2
    assert alias.read_bytes() == FIXED
    assert leftovers(tmp_path) == []


def test_fix_keeps_mode_owner_and_extended_attributes(path, run_cli):
    path.chmod(0o751)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    owner = (path.stat().st_uid, path.stat().st_gid)
    try:
        os.setxattr(path, "user.origin", b"kept")
        xattrs = True
    except (OSError, AttributeError):  # a file system (or a system) without user attributes
        xattrs = False
    assert run_cli("fix", "--select", SELECT, path)[0] == 0
    assert path.read_bytes() == FIXED
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert (path.stat().st_uid, path.stat().st_gid) == owner
    assert not xattrs or os.getxattr(path, "user.origin") == b"kept"


def start_appender(path: Path, seed: int = 0, long_pauses: bool = False, wait_half_way: bool = False
                   ) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(seed), str(int(long_pauses)),
                             str(int(wait_half_way))], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def test_fix_while_a_process_holds_the_file_open_and_appends_loses_none_of_its_lines(tmp_path, path, run_cli):
    """The appender writes half its lines, `fix` writes the file while it holds it open, the appender
    writes the rest through the same descriptor: all are there, after the fixed text (a rename would
    have left the second half in the replaced file, which nobody can read)."""
    appender = start_appender(path, wait_half_way=True)
    assert appender.stdout.readline() == b"waiting\n"
    code, _, err = run_cli("fix", "--select", SELECT, path)
    assert (code, err) == (0, "Fixed 1 finding in 1 file.\n")
    appender.communicate(b"go on\n", timeout=60)
    assert appender.returncode == 0
    assert path.read_bytes() == FIXED + b"".join(LINES)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("seed", range(3))
def test_fix_over_and_over_while_a_process_appends_loses_no_line(tmp_path, path, seed):
    """`fix` runs again and again while another process appends 50 lines with random pauses, most too
    short for a run to read, fix and write in between (refused: changed since read), a few long enough
    (written while that process holds the file open): every line is in the file, in order, after the
    fixed text or (on a machine too slow for any pause) the original one. The steps of a write that an
    append can fall between are pinned down in the tests below."""
    assert fixed(ORIGINAL + b"".join(LINES)) == FIXED + b"".join(LINES)  # the fix leaves appended lines be
    appender = start_appender(path, seed=seed, long_pauses=True)
    runs = []
    while appender.poll() is None:
        runs.append(run_job(fix_job(path)).fixed)
    assert appender.returncode == 0
    assert path.read_bytes() in (ORIGINAL + b"".join(LINES), FIXED + b"".join(LINES)), runs
    assert leftovers(tmp_path) == []


def appending_in_between(monkeypatch, path: Path, step: str, call: int = 1) -> None:
    """Another process appends a line to `path` just before the `call`-th call of `step` (of the write):
    between the last check and the write, where no check can see it coming."""
    original, calls = getattr(source, step), []

    def append_then_step(*args):
        calls.append(args)
        if len(calls) == call:
            with open(path, "ab", buffering=0) as logger:
                logger.write(b"# logged\n")
        return original(*args)

    monkeypatch.setattr(source, step, append_then_step)


@pytest.mark.parametrize(("new", "step", "call"), [(FIXED, "_append", 1), (SHORTER, "_write_at", 2)],
                         ids=["growing", "shrinking"])
def test_an_append_just_before_the_write_is_kept_and_the_write_refused(path, monkeypatch, new, step, call):
    """Growing, the new text's end is appended, so it lands after the other process's line (found there:
    taken back off); shrinking, the file is cut short only if no line was appended (one was: the text
    put back). Either way the file is as the other process left it, and the caller re-reads it.
    (Shrinking, the file's write is the second at an offset: the first is the journal's.)"""
    appending_in_between(monkeypatch, path, step, call)
    assert write_in_place(path, new) is False
    assert path.read_bytes() == ORIGINAL + b"# logged\n"
    assert leftovers(path.parent) == []


def test_the_fix_runner_re_reads_a_file_appended_to_during_its_write_and_fixes_it(path, monkeypatch):
    appending_in_between(monkeypatch, path, "_append")
    result = run_job(fix_job(path))
    assert (result.errors, result.fixed) == ([], 1)
    assert path.read_bytes() == FIXED + b"# logged\n"


def test_a_file_that_is_not_a_regular_file_is_refused_and_nothing_is_created(tmp_path):
    os.mkfifo(tmp_path / "a.py")
    with pytest.raises(OSError, match="not a regular file"):
        write_in_place(tmp_path / "a.py", FIXED)
    assert leftovers(tmp_path) == []


# --- failures part-way: the file is put back --------------------------------------------------------


def disk_full() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_write_failing_part_way_is_undone_and_its_journal_removed(path, monkeypatch):
    """The disk fills up after half the new end was appended: the old text is put back."""
    append = source._append

    def append_half_then_fail(fd, data):
        append(fd, data[:len(data) // 2])
        raise disk_full()

    monkeypatch.setattr(source, "_append", append_half_then_fail)
    with pytest.raises(OSError, match="No space left on device"):
        write_in_place(path, FIXED)
    assert path.read_bytes() == ORIGINAL
    assert leftovers(path.parent) == []


def test_a_write_that_cannot_be_undone_either_keeps_its_journal_for_the_next_fix(path, monkeypatch):
    overwrite, calls = source._overwrite, []

    def overwrite_half_then_fail(fd, current, new):
        calls.append(new)
        if len(calls) == 1:  # the write: half the new end appended
            source._append(fd, new[len(current):][:6])
        raise disk_full()  # the write, then the undo

    monkeypatch.setattr(source, "_overwrite", overwrite_half_then_fail)
    with pytest.raises(OSError) as raised:
        write_in_place(path, FIXED)
    assert calls == [FIXED, ORIGINAL]  # the undo was tried
    assert raised.value.strerror == (f"No space left on device; the write is unfinished: {journal_of(path)} "
                                     "holds the file's text before and after")
    assert path.read_bytes() == ORIGINAL + FIXED[len(ORIGINAL):][:6]
    monkeypatch.setattr(source, "_overwrite", overwrite)
    with settled_for_reading(path):
        assert path.read_bytes() == FIXED
    assert leftovers(path.parent) == []


# --- killed at each step: what is left, and what the next `fix` makes of it --------------------------


def dying_at(name: str, module=source, call: int = 1, when: str = "before"):
    """Make the `call`-th call of `module.name` kill the process `when`: before it, after it, or
    "halfway" (a step writing `data` as its second argument writes half of it: a kill between pages)."""
    step, calls = getattr(module, name), []

    def dying(*args):
        calls.append(args)
        if len(calls) == call:
            if when == "after":
                step(*args)
            elif when == "halfway":
                step(args[0], args[1][:len(args[1]) // 2], *args[2:])
            os._exit(DIED)
        return step(*args)

    setattr(module, name, dying)


def killed_while_writing(path: Path, new: bytes, *crash_point) -> None:
    """`write_in_place(path, new)` in a child process that dies at the crash point (see `dying_at`)."""
    child = os.fork()
    if child == 0:
        try:
            dying_at(*crash_point)
            write_in_place(path, new)
        finally:
            os._exit(1)  # the crash point was not reached
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == DIED


OLD_SIZE, NEW_END = len(ORIGINAL), FIXED[len(ORIGINAL):]
HALF = OLD_SIZE // 2
# Per step a writer may be killed at: the text written, the crash point, the file the crash leaves, and
# the text the next `fix` settles it to (before fixing it): the old one, or the new one (finished).
KILLED_AT = {
    "journal cut short": (FIXED, ("_write_at", source, 1, "halfway"), ORIGINAL, ORIGINAL),
    "journal written, file untouched": (FIXED, ("_overwrite",), ORIGINAL, ORIGINAL),
    "new end half appended": (FIXED, ("_append", source, 1, "halfway"), ORIGINAL + NEW_END[:len(NEW_END) // 2],
                              FIXED),
    "new end appended": (FIXED, ("_append", source, 1, "after"), ORIGINAL + NEW_END, FIXED),
    "new text half written over the old": (FIXED, ("_write_at", source, 2, "halfway"),
                                           FIXED[:HALF] + ORIGINAL[HALF:] + NEW_END, FIXED),
    "shrinking, not yet cut short": (SHORTER, ("ftruncate", os), SHORTER + ORIGINAL[len(SHORTER):], SHORTER),
    "written, journal not yet removed": (FIXED, ("unlink", os), FIXED, FIXED),
}


@pytest.mark.parametrize("state", KILLED_AT)
def test_killed_at_each_step_the_file_is_old_new_or_a_mix_and_settled_before_it_is_read(path, state):
    new, crash_point, left, settled = KILLED_AT[state]
    killed_while_writing(path, new, *crash_point)
    journal = journal_of(path).read_bytes()
    assert path.read_bytes() == left
    if state == "journal cut short":
        assert len(journal) < len(ORIGINAL + new)
    else:
        assert journal.endswith(ORIGINAL + new)
    assert stat.S_IMODE(journal_of(path).stat().st_mode) == 0o600  # it holds the file's text
    with settled_for_reading(path):
        assert path.read_bytes() == settled
    assert leftovers(path.parent) == []


@pytest.mark.parametrize("state", KILLED_AT)
def test_the_next_fix_finishes_or_drops_the_write_then_fixes(path, run_cli, state):
    new, crash_point, _, settled = KILLED_AT[state]
    killed_while_writing(path, new, *crash_point)
    code, _, err = run_cli("fix", "--select", SELECT, path)
    assert code == 0, err
    assert path.read_bytes() == fixed(settled)
    assert leftovers(path.parent) == []


def test_check_lints_the_file_as_it_is_and_writes_nothing(path, run_cli):
    killed_while_writing(path, FIXED, *KILLED_AT["new end appended"][1])
    left, journal = path.read_bytes(), journal_of(path).read_bytes()
    run_cli("check", "--select", SELECT, "--no-cache", path)
    assert (path.read_bytes(), journal_of(path).read_bytes()) == (left, journal)


def test_a_journal_that_fails_its_checksum_is_removed_and_the_file_left_as_it_is(path):
    killed_while_writing(path, FIXED, *KILLED_AT["journal written, file untouched"][1])
    journal = journal_of(path).read_bytes()
    journal_of(path).write_bytes(journal[:-1] + bytes([journal[-1] ^ 1]))
    with settled_for_reading(path):
        assert path.read_bytes() == ORIGINAL
    assert leftovers(path.parent) == []


EDITED = b"# edited after the crash\n" + ORIGINAL


def test_a_file_edited_after_the_crash_is_never_overwritten_and_the_journal_named(tmp_path, path, run_cli):
    killed_while_writing(path, FIXED, *KILLED_AT["new end appended"][1])
    path.write_bytes(EDITED)
    journal = journal_of(path).read_bytes()
    (tmp_path / "b.py").write_bytes(ORIGINAL)
    with settled_for_reading(path):  # left for the write to report
        assert path.read_bytes() == EDITED
    with pytest.raises(FileExistsError) as raised:
        write_in_place(path, fixed(EDITED))
    assert raised.value.strerror == (
        f"a `fix` of it was interrupted, and it was changed since: {journal_of(path)} holds its "
        "text from before and after that fix; delete that file once this one is as it should be")
    code, _, err = run_cli("fix", "--select", SELECT, "--jobs", "1", ".", cwd=tmp_path)
    assert code == 2
    assert err.splitlines() == ["Fixed 1 finding in 1 file.",
                                f"lintloop: error: a.py: cannot write the fixes: {raised.value.strerror}; "
                                "the file is unchanged"]
    assert (path.read_bytes(), journal_of(path).read_bytes()) == (EDITED, journal)
    assert (tmp_path / "b.py").read_bytes() == FIXED


PLANTED = b"import os\nos.system('echo pwned')\n"


def planted_journals(path: Path) -> dict[str, bytes]:
    """Journals of a write of PLANTED over the file's text that a repository could ship beside it, in
    the layouts lintloop has used (beside the file; this version's header), their digests right."""
    old, new = path.read_bytes(), PLANTED
    digest = source._digest
    first = b"lintloop journal 1\nold %d %s\nnew %d %s\n" % (len(old), digest(old), len(new), digest(new))
    return {f".{path.name}.lintloop-journal": first + old + new,
            f".{path.name}.journal": source._journal_bytes(path.resolve(), old, new)}


def test_a_journal_planted_in_the_working_tree_is_never_read(path, run_cli):
    """A pull request can add any file: journals beside the file (lintloop kept them there once) that
    would turn it into PLANTED are not journals; `fix` fixes the file as it is and leaves them."""
    for name, journal in planted_journals(path).items():
        (path.parent / name).write_bytes(journal)
    mixed = PLANTED[:10] + path.read_bytes()[10:]  # the file "part-way" from its text to the planted one
    path.write_bytes(mixed)
    with settled_for_reading(path):
        assert path.read_bytes() == mixed
    code, _, err = run_cli("fix", "--select", SELECT, path, cwd=path.parent)
    assert b"os.system" not in path.read_bytes()
    assert {p.name for p in path.parent.iterdir()} == {"a.py", *planted_journals(path)}


def test_journals_are_kept_in_a_private_folder_of_the_user(path, monkeypatch):
    killed_while_writing(path, FIXED, *KILLED_AT["new end appended"][1])
    folder = journal_of(path).parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(journal_of(path).stat().st_mode) == 0o600
    assert not any(p.is_relative_to(path.parent) for p in (folder, journal_of(path)))


def test_a_journal_folder_that_is_a_link_or_not_private_is_not_used(tmp_path, path, monkeypatch):
    """A journal folder that leads elsewhere (a symbolic link), or whose parent another user owns, is not
    trusted: the journals go to this user's folder in the temporary folder instead."""
    cache = tmp_path / "cache"
    (cache / "lintloop").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (cache / "lintloop" / "journal").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where user_cache falls back to
    (tmp_path / "tmp").mkdir()
    assert write_in_place(path, FIXED)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert journal_path(path.stat()) == tmp_path / "tmp" / f"lintloop-{os.geteuid()}" / "journal" / \
        f"{path.stat().st_dev:x}-{path.stat().st_ino:x}"
    if os.geteuid() == 0:  # a folder above it another user owns
        os.lchown(cache / "lintloop" / "journal", NOBODY, NOBODY)
        (cache / "lintloop" / "journal").unlink()
        (cache / "lintloop").chmod(0o755)
        os.chown(cache / "lintloop", NOBODY, NOBODY)
        assert journal_path(path.stat()).parent == tmp_path / "tmp" / f"lintloop-{os.geteuid()}" / "journal"


def test_a_journal_of_another_file_that_had_the_inode_is_dropped(path):
    """Journals are named by device and inode, which a file deleted after a crash hands on to a new one:
    a journal records its file's path, and one of another path is stale, never applied."""
    killed_while_writing(path, FIXED, *KILLED_AT["new end appended"][1])
    journal = journal_of(path)
    moved = path.with_name("b.py")
    path.rename(moved)  # the same inode under another name: as if reused
    with settled_for_reading(moved):
        assert moved.read_bytes() == ORIGINAL + NEW_END
    assert not journal.exists()


def test_a_journal_whose_writer_is_alive_is_left_and_its_write_waited_for(path, monkeypatch):
    """A writer holds the file's lock while its journal exists: a reader waits for it rather than
    taking its journal for a dead writer's; one held too long is left alone, and the write refused."""
    killed_while_writing(path, FIXED, *KILLED_AT["new end appended"][1])
    mixed = path.read_bytes()
    with open(path, "rb+") as writer:  # the live writer: another open file, locked
        fcntl.flock(writer, fcntl.LOCK_EX)
        lock_wait = source.LOCK_WAIT_SECONDS
        monkeypatch.setattr(source, "LOCK_WAIT_SECONDS", 0.05)
        with settled_for_reading(path):
            assert path.read_bytes() == mixed and journal_of(path).exists()
        with pytest.raises(BlockingIOError, match="another process holds the file locked"):
            write_in_place(path, FIXED)
        monkeypatch.setattr(source, "LOCK_WAIT_SECONDS", lock_wait)

        def finish_writing() -> None:
            writer.seek(0)
            writer.write(FIXED)
            writer.flush()
            journal_of(path).unlink()
            fcntl.flock(writer, fcntl.LOCK_UN)

        finisher = threading.Timer(0.2, finish_writing)
        started = time.monotonic()
        finisher.start()
        with settled_for_reading(path):
            waited = time.monotonic() - started
            assert path.read_bytes() == FIXED
        finisher.join()
    assert waited >= 0.2
    assert leftovers(path.parent) == []


def test_the_writer_finishes_a_stale_journal_first_and_then_finds_the_file_changed(path):
    """Without the read settled first (a caller that does not use `settled_for_reading`): the write
    finishes the interrupted one, which changed the file since the caller read it."""
    killed_while_writing(path, FIXED, *KILLED_AT["new end appended"][1])
    read = path.stat()
    assert write_in_place(path, b"# fixes of the text read\n", unchanged_since=read) is False
    assert path.read_bytes() == FIXED
    assert leftovers(path.parent) == []
