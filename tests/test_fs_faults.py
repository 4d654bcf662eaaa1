"""File-system faults (issue 14, item 4): read-only and unreadable files and directories, files deleted,
replaced or rewritten while linting, symbolic links, FIFOs and directories named like source files, a
full disk, two `fix` runs at once and `fix` killed mid-run. Never a half-written or lost file, one clear
message per file, the run goes on, exit codes as the contract says. (How `fix` writes in place and
recovers from its journal: tests/test_fix_in_place.py.) Each test has a user cache folder of its own
(`XDG_CACHE_HOME`), where `fix` keeps its journals.

Permission cases run `lintloop` as the user `nobody` (root may write anything) and skip where that
is impossible. LINTLOOP_FS_KILL_ROUNDS sets the rounds of the kill test (a long run: 200).
"""

from __future__ import annotations

import errno
import faulthandler
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

import lintloop.cli
import lintloop.linter
import lintloop.source
from lintloop.linter import fix_text
from lintloop.rule import RuleSet
from lintloop.rules import BY_CODE
from lintloop.runner import FIX_ATTEMPTS, Job, run_job
from lintloop.source import journal_path
from lintloop.user_cache import user_cache_directory

FIXTURES = Path(__file__).parent / "fixtures"
SELECT = "LL203"  # a safe fix (adds `@tf.function`) that leaves no finding behind
ORIGINAL = (FIXTURES / "LL203_bad.py").read_bytes()
RULESET = RuleSet([BY_CODE[SELECT]], {})
FIXED = fix_text("a.py", ORIGINAL.decode(), RULESET, False).text.encode()
NOBODY = 65534


def lintloop_command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "lintloop", *map(str, args)]


def run_lintloop(*args: str | Path, cwd: Path, as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
    """`lintloop ARGS` in a new process (timed: a FIFO read by mistake would hang, not fail)."""
    prefix = []
    if as_nobody:
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        let_anyone_through(cwd)
    return subprocess.run([*prefix, *lintloop_command(*args)], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(autouse=True)
def private_user_cache(tmp_path_factory, monkeypatch):
    """This test's own user cache folder (where `fix` keeps its journals), for its processes too."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("user-cache")))


def leftovers(tree: Path) -> list[Path]:
    """Files `fix` left: beside the ones it wrote (the journal or temporary file of an older lintloop:
    hidden files, which nothing else here makes), or journals in the user's cache folder."""
    journals = user_cache_directory() / "journal"
    return [p for p in tree.rglob(".*")] + (list(journals.iterdir()) if journals.is_dir() else [])


def let_anyone_through(directory: Path) -> None:
    """Let other users pass through the directories above `directory` up to the temporary root (pytest
    makes its own 0700, and sets it back whenever a pytest session starts)."""
    top = Path(tempfile.gettempdir()).resolve()
    for parent in directory.resolve().parents:
        if parent == top or top not in parent.parents:
            break
        parent.chmod(parent.stat().st_mode | stat.S_IXOTH)


@contextmanager
def hang_guard(seconds: int = 60):
    """Fail loudly (the worker exits with a traceback) instead of waiting forever on a FIFO."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A directory of two fixable files."""
    root = tmp_path / "tree"
    root.mkdir()
    for name in ("a.py", "b.py"):
        (root / name).write_bytes(ORIGINAL)
    return root


# --- symbolic links, FIFOs, directories named like files -------------------------------------------


def test_symlinks_loops_dangling_outside_and_twice_are_handled(tmp_path, run_cli):
    tree, outside = tmp_path / "t", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (tree / "a.py").write_bytes(ORIGINAL)
    (outside / "o.py").write_bytes(ORIGINAL)
    (tree / "link.py").symlink_to("a.py")  # the same file twice: linted and fixed once, through its name
    (tree / "dangling.py").symlink_to("nowhere.py")
    (tree / "loop1.py").symlink_to("loop2.py")
    (tree / "loop2.py").symlink_to("loop1.py")
    (tree / "out").symlink_to(outside, target_is_directory=True)  # not followed
    (tree / "self").symlink_to(".", target_is_directory=True)

    code, out, _ = run_cli("check", "--select", SELECT, "--no-cache", "--format", "json", "t", cwd=tmp_path)
    assert code == 1
    assert [finding["path"] for finding in json.loads(out)] == [os.path.join("t", "a.py")]

    code, _, err = run_cli("fix", "--select", SELECT, "t", cwd=tmp_path)
    assert (code, err) == (0, "Fixed 1 finding in 1 file.\n")
    assert (tree / "a.py").read_bytes() == FIXED
    assert (tree / "link.py").is_symlink() and os.readlink(tree / "link.py") == "a.py"
    assert (outside / "o.py").read_bytes() == ORIGINAL
    assert leftovers(tmp_path) == []


def test_fix_through_a_symlink_named_explicitly_keeps_the_link(tree, run_cli):
    (tree / "link.py").symlink_to("a.py")
    code, _, _ = run_cli("fix", "--select", SELECT, tree / "link.py", cwd=tree)
    assert code == 0
    assert (tree / "link.py").is_symlink() and (tree / "a.py").read_bytes() == FIXED


@pytest.mark.parametrize("how", ["walk", "named", "named folder link", "link chain", "absolute link", "hard link"])
def test_fix_never_writes_a_file_outside_the_project_through_a_link(tmp_path, run_cli, how):
    """A working tree can hold links to anything (a clone, a pull request): a file that really lies
    outside the project, or has other names that may, is linted and reported, not rewritten."""
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    victim = outside / "victim.py"
    victim.write_bytes(ORIGINAL)
    argument = "."
    if how in ("walk", "named"):
        (project / "train.py").symlink_to("../outside/victim.py")
        argument = "train.py" if how == "named" else "."
    elif how == "named folder link":
        (project / "src").symlink_to("../outside")
        argument = "src"
    elif how == "link chain":
        (project / "a.py").symlink_to("b.py")
        (project / "b.py").symlink_to(victim)
    elif how == "absolute link":
        (project / "train.py").symlink_to(victim)
    else:
        os.link(victim, project / "train.py")
    code, out, err = run_cli("fix", "--select", SELECT, "--format", "concise", argument, cwd=project)
    assert code == 1, err
    assert victim.read_bytes() == ORIGINAL
    assert "not fixed: " in err and "`--write-outside-project` fixes it there" in err
    assert f"{SELECT} " in out  # the finding stays, reported
    code, _, err = run_cli("fix", "--select", SELECT, "--write-outside-project", argument, cwd=project)
    assert code == 0 and victim.read_bytes() == FIXED, err


def test_fix_writes_through_a_link_that_stays_in_the_project(tmp_path, run_cli):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "train.py").write_bytes(ORIGINAL)
    (tmp_path / "train.py").symlink_to("real/train.py")
    code, _, err = run_cli("fix", "--select", SELECT, "train.py", cwd=tmp_path)
    assert (code, err) == (0, "Fixed 1 finding in 1 file.\n")
    assert (tmp_path / "real" / "train.py").read_bytes() == FIXED and (tmp_path / "train.py").is_symlink()


def test_a_link_swapped_in_after_the_check_is_refused_by_the_write(tmp_path):
    """The write checks again, on the file it opened: a link put in place of the file between
    `fix`'s look and its write leads nowhere outside either."""
    (tmp_path / "outside.py").write_bytes(ORIGINAL)
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "train.py").symlink_to("../outside.py")
    with pytest.raises(PermissionError, match="not written: it is a link to .*outside.py, outside the project"):
        lintloop.source.write_in_place(tmp_path / "project" / "train.py", FIXED,
                                       within=(str(tmp_path / "project"),))
    assert (tmp_path / "outside.py").read_bytes() == ORIGINAL


def test_named_fifo_dangling_link_loop_and_directory_each_get_a_message(tmp_path):
    os.mkfifo(tmp_path / "fifo.py")
    (tmp_path / "dangling.py").symlink_to("nowhere.py")
    (tmp_path / "loop.py").symlink_to("loop.py")
    (tmp_path / "dir.py").mkdir()
    (tmp_path / "dir.py" / "inner.py").write_bytes(ORIGINAL)

    run = run_lintloop("check", "--select", SELECT, "--no-cache", "--format", "concise",
                       "fifo.py", "dangling.py", "loop.py", "dir.py", "missing.py", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stdout.startswith(os.path.join("dir.py", "inner.py"))
    assert run.stderr.splitlines() == [
        "lintloop: error: fifo.py: not a regular file or directory (a FIFO, socket or device): not read",
        "lintloop: error: dangling.py: a symbolic link that cannot be followed: No such file or directory",
        "lintloop: error: loop.py: a symbolic link that cannot be followed: Too many levels of symbolic links",
        "lintloop: error: missing.py: no such file or directory",
    ]


def test_fifo_and_directory_named_like_sources_in_a_directory_are_not_read(tree):
    os.mkfifo(tree / "fifo.py")
    (tree / "dir.py").mkdir()
    (tree / "dir.py" / "inner.py").write_bytes(ORIGINAL)
    run = run_lintloop("fix", "--select", SELECT, ".", cwd=tree)
    assert (run.returncode, run.stderr) == (0, "Fixed 3 findings in 3 files.\n")
    assert (tree / "dir.py" / "inner.py").read_bytes() == FIXED
    assert stat.S_ISFIFO((tree / "fifo.py").lstat().st_mode)


# --- files deleted, replaced or rewritten while linting ---------------------------------------------


def discovering_then(action, monkeypatch):
    """Run `action(files)` between discovery and the linting of the files found."""
    discover = lintloop.cli.discover

    def discover_then_act(*args, **kwargs):
        files, problems = discover(*args, **kwargs)
        action(files)
        return files, problems

    monkeypatch.setattr(lintloop.cli, "discover", discover_then_act)


@pytest.mark.parametrize("command", ["check", "fix"])
def test_file_deleted_after_discovery_is_one_message_and_the_run_goes_on(tree, run_cli, monkeypatch, command):
    discovering_then(lambda files: (tree / "a.py").unlink(), monkeypatch)
    code, out, err = run_cli(command, "--select", SELECT, "--no-cache", "--jobs", "1", "--format", "concise", ".",
                             cwd=tree)
    assert code == 2
    assert "lintloop: error: a.py: cannot read: No such file or directory" in err.splitlines()
    if command == "check":
        assert "b.py:" in out
    else:
        assert (tree / "b.py").read_bytes() == FIXED


@pytest.mark.parametrize("command", ["check", "fix"])
def test_file_replaced_by_a_fifo_after_discovery_is_refused_not_waited_on(tree, run_cli, monkeypatch, command):
    def replace_by_fifo(files):
        (tree / "a.py").unlink()
        os.mkfifo(tree / "a.py")

    discovering_then(replace_by_fifo, monkeypatch)
    with hang_guard():
        code, _, err = run_cli(command, "--select", SELECT, "--no-cache", "--jobs", "1", ".", cwd=tree)
    assert code == 2
    assert "lintloop: error: a.py: cannot read: not a regular file" in err.splitlines()


def fix_job(path: Path) -> Job:
    return Job(str(path), path.name, (SELECT,), "{}", "fix")


def test_file_rewritten_while_being_fixed_keeps_the_other_writers_content_and_fixes_it(tree, monkeypatch):
    """Another process (an editor, another `fix`) writes the file after this run read it: its content
    is not overwritten with fixes of the old one; the new content is read and fixed."""
    edited = ORIGINAL + b"\n# edited meanwhile\n"
    calls = []

    def fix_text_while_someone_writes(*args, **kwargs):
        if not calls:
            (tree / "a.py").write_bytes(edited)
        calls.append(args)
        return fix_text(*args, **kwargs)

    monkeypatch.setattr(lintloop.linter, "fix_text", fix_text_while_someone_writes)
    result = run_job(fix_job(tree / "a.py"))
    assert (len(calls), result.errors, result.fixed) == (2, [], 1)
    assert (tree / "a.py").read_bytes() == fix_text("a.py", edited.decode(), RULESET, False).text.encode()


def test_file_rewritten_at_every_attempt_is_left_as_the_other_writer_left_it(tree, monkeypatch):
    writes = []

    def fix_text_while_someone_keeps_writing(*args, **kwargs):
        writes.append(ORIGINAL + f"\n# edit {len(writes)}\n".encode())
        (tree / "a.py").write_bytes(writes[-1])
        return fix_text(*args, **kwargs)

    monkeypatch.setattr(lintloop.linter, "fix_text", fix_text_while_someone_keeps_writing)
    result = run_job(fix_job(tree / "a.py"))
    assert len(writes) == FIX_ATTEMPTS
    assert result.errors == ["a.py: not fixed: another process kept changing it while it was being fixed; "
                             "left as that process wrote it"]
    assert (tree / "a.py").read_bytes() == writes[-1]
    assert leftovers(tree) == []


# --- a full disk ------------------------------------------------------------------------------------


def test_full_disk_during_fix_leaves_that_file_whole_and_fixes_the_others(tree, run_cli, monkeypatch):
    fsync, failed = os.fsync, []

    def fsync_on_a_full_disk(fd: int) -> None:
        if not failed:  # the first file written finds the disk full; later ones find room again
            failed.append(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_on_a_full_disk)
    code, out, err = run_cli("fix", "--select", SELECT, "--jobs", "1", "--format", "concise", ".", cwd=tree)
    assert code == 2
    assert ("lintloop: error: a.py: cannot write the fixes: No space left on device; the file is unchanged"
            in err.splitlines())
    assert "Fixed 1 finding in 1 file." in err
    assert out.startswith("a.py:")  # its finding is still there, and reported
    assert (tree / "a.py").read_bytes() == ORIGINAL
    assert (tree / "b.py").read_bytes() == FIXED
    assert leftovers(tree) == []


# --- permissions, as a user that is not root --------------------------------------------------------


@pytest.fixture(scope="module")
def as_nobody_possible(tmp_path_factory) -> bool:
    """Whether `lintloop` can run as `nobody` here (root with setpriv, and the interpreter and the
    project readable by that user); as a non-root user the tests run as that user instead."""
    if os.geteuid() != 0:
        return False
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed: cannot drop root's privileges")
    probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                            sys.executable, "-c", "import lintloop.cli"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip("the user nobody cannot run this interpreter or import lintloop")
    return True


@pytest.fixture
def nobody_tree(tmp_path: Path, as_nobody_possible: bool) -> Path:
    """An empty directory that `nobody` owns (when root)."""
    root = tmp_path / "tree"
    root.mkdir()
    if as_nobody_possible:
        os.chown(root, NOBODY, NOBODY)
    return root


def populate(root: Path, as_nobody: bool, files: dict[str, int], directories: dict[str, int] | None = None) -> None:
    """Write ORIGINAL to each file with its mode, then set each directory's mode (owned by nobody)."""
    for name, mode in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(ORIGINAL)
        path.chmod(mode)
    for path in [p for p in root.rglob("*")] + [root]:
        if as_nobody:
            os.lchown(path, NOBODY, NOBODY)
    for name, mode in (directories or {}).items():
        (root / name).chmod(mode)


@pytest.fixture
def restore_modes(nobody_tree):
    """Make the tree removable again after a test that closed parts of it."""
    yield
    for path in [nobody_tree, *nobody_tree.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)


def test_fix_on_read_only_file_and_directory_as_non_root(nobody_tree, as_nobody_possible, restore_modes):
    populate(nobody_tree, as_nobody_possible, {"ok.py": 0o644, "ro.py": 0o444, "closed/inner.py": 0o644},
             directories={"closed": 0o555})
    run = run_lintloop("fix", "--select", SELECT, "--format", "concise", ".", cwd=nobody_tree,
                       as_nobody=as_nobody_possible)
    assert run.returncode == 2
    # A writable file in a closed folder is fixed: in place, with its journal in the user's own folder.
    assert run.stderr.splitlines() == [
        "Fixed 2 findings in 2 files.",
        "lintloop: error: ro.py: cannot write the fixes: the file is read-only; the file is unchanged",
    ]
    assert [line.split(":")[0] for line in run.stdout.splitlines() if ".py:" in line] == ["ro.py"]
    assert (nobody_tree / "closed" / "inner.py").read_bytes() == FIXED
    assert (nobody_tree / "ok.py").read_bytes() == FIXED
    assert (nobody_tree / "ro.py").read_bytes() == ORIGINAL
    assert stat.S_IMODE((nobody_tree / "ro.py").stat().st_mode) == 0o444
    assert leftovers(nobody_tree) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="root's case (as another user: the test above)")
def test_fix_as_root_refuses_a_file_without_write_bits(tree, run_cli):
    """Root may write any file (access(2) says yes), yet a mode without a write bit means read-only."""
    modes = {"ro.py": 0o444, "owner_only.py": 0o400, "script.py": 0o555}
    for name, mode in modes.items():
        (tree / name).write_bytes(ORIGINAL)
        (tree / name).chmod(mode)
    code, _, err = run_cli("fix", "--select", SELECT, "--jobs", "1", ".", cwd=tree)
    assert code == 2
    assert err.splitlines() == ["Fixed 2 findings in 2 files."] + [
        f"lintloop: error: {name}: cannot write the fixes: the file is read-only; the file is unchanged"
        for name in sorted(modes)]
    for name, mode in modes.items():
        assert (tree / name).read_bytes() == ORIGINAL and stat.S_IMODE((tree / name).stat().st_mode) == mode
    assert (tree / "a.py").read_bytes() == (tree / "b.py").read_bytes() == FIXED
    assert leftovers(tree) == []


def test_check_on_a_read_only_tree_as_non_root(nobody_tree, as_nobody_possible, restore_modes):
    """Nothing to write but the cache, which cannot be created here: the check still reports."""
    populate(nobody_tree, as_nobody_possible, {"a.py": 0o444, "sub/b.py": 0o444}, directories={"sub": 0o555})
    nobody_tree.chmod(0o555)
    run = run_lintloop("check", "--select", SELECT, "--format", "concise", ".", cwd=nobody_tree,
                       as_nobody=as_nobody_possible)
    assert run.returncode == 1, run.stderr
    assert [line.split(":")[0] for line in run.stdout.splitlines() if ".py:" in line] == ["a.py", "sub/b.py"]


def test_unreadable_file_and_directory_as_non_root(nobody_tree, as_nobody_possible, restore_modes):
    populate(nobody_tree, as_nobody_possible, {"open.py": 0o644, "secret.py": 0o000, "closed/x.py": 0o644},
             directories={"closed": 0o000})
    for command in ("check", "fix"):
        run = run_lintloop(command, "--select", SELECT, "--no-cache", "--format", "concise", ".",
                           cwd=nobody_tree, as_nobody=as_nobody_possible)
        assert run.returncode == 2
        assert "lintloop: error: closed: cannot read directory: Permission denied" in run.stderr.splitlines()
        assert "lintloop: error: secret.py: cannot read: Permission denied" in run.stderr.splitlines()
    assert (nobody_tree / "open.py").read_bytes() == FIXED  # the run went on


# --- concurrent and interrupted `fix` runs --------------------------------------------------------


def many_fixable_files(root: Path, count: int) -> list[Path]:
    paths = [root / f"pkg{i % 4}" / f"m{i:03d}.py" for i in range(count)]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(ORIGINAL)
    return paths


def test_two_fix_runs_on_one_tree_at_once_both_finish_and_fix_once(tmp_path):
    paths = many_fixable_files(tmp_path, 48)
    command = lintloop_command("fix", "--select", SELECT, "--jobs", "2", ".")
    runs = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    outcomes = [(run.wait(timeout=120), run.stderr.read()) for run in runs]
    for code, err in outcomes:
        assert code == 0 and "error" not in err, err
    fixed = [int(err.split()[1]) for _, err in outcomes]  # "Fixed N findings in M files."
    assert sum(fixed) >= len(paths)  # both may fix a file read before either wrote it: to the same bytes
    assert all(path.read_bytes() == FIXED for path in paths)
    assert leftovers(tmp_path) == []


def test_fix_killed_mid_run_leaves_every_file_whole_or_recoverable_and_the_next_run_recovers(tmp_path):
    """SIGKILL at random moments of `fix` over many files: each file is the original or the fixed version,
    byte for byte, or has a journal beside it (killed while writing it), from which the next `fix`
    finishes the write; no journal is left after that run. A file with a journal is kept as the kill left
    it for the next round's run (itself killed, maybe before it gets there) and the final one."""
    rounds = int(os.environ.get("LINTLOOP_FS_KILL_ROUNDS", "3"))
    paths = many_fixable_files(tmp_path, 24)
    command = lintloop_command("fix", "--select", SELECT, "--jobs", "2", ".")
    started = time.monotonic()
    subprocess.run(command, cwd=tmp_path, capture_output=True, check=False, timeout=120)
    full_run = time.monotonic() - started
    rng = random.Random(14)
    seen = {"killed": 0, "finished": 0, "original": 0, "fixed": 0, "journal left": 0, "neither, journal left": 0}
    for _ in range(rounds):
        for path in paths:
            if not journal_of(path).exists():
                path.write_bytes(ORIGINAL)
        run = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
        time.sleep(rng.uniform(0.2, 1.5 * full_run))  # some runs end first: a loaded machine is slower
        with suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)  # the workers too
        seen["killed" if run.wait() == -signal.SIGKILL else "finished"] += 1
        for path in paths:
            data, journaled = path.read_bytes(), journal_of(path).exists()
            assert data in (ORIGINAL, FIXED) or journaled, path
            seen["original" if data == ORIGINAL else "fixed" if data == FIXED else "neither, journal left"] += 1
            seen["journal left"] += journaled
        assert set(leftovers(tmp_path)) <= {journal_of(path) for path in paths}
    print(f"kill rounds {rounds}, full run {full_run:.2f} s, files seen: {seen}")
    final = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, final.stderr
    assert all(path.read_bytes() == FIXED for path in paths)
    assert leftovers(tmp_path) == []


def journal_of(path: Path) -> Path:
    return journal_path(path.stat())


def test_a_directory_above_that_cannot_be_searched_is_no_error(nobody_tree, as_nobody_possible, restore_modes):
    """Config and .gitignore lookups walk up from the working directory: an unsearchable parent
    (here, closed after the run's working directory was entered) means "none there"."""
    if not as_nobody_possible:
        pytest.skip("needs to run as a user other than root")
    inner = nobody_tree / "closed" / "inner"
    populate(nobody_tree, True, {"closed/inner/train.py": 0o644})
    os.chown(nobody_tree / "closed", 0, 0)
    (nobody_tree / "closed").chmod(0o700)
    run = run_lintloop("check", "--select", SELECT, "--no-cache", "--format", "concise", ".", cwd=inner,
                       as_nobody=True)
    assert run.returncode == 1, run.stderr
    assert run.stderr == "" and run.stdout.startswith("train.py:")


def test_a_gitignore_with_invalid_patterns_or_that_is_a_fifo_is_read_as_git_reads_it(tmp_path):
    # git passes over a pattern it cannot use (a lone backslash); pathspec raised on it (an internal error).
    (tmp_path / ".gitignore").write_text("\\\nbuild/\n[z-a]\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "skipped.py").write_bytes(ORIGINAL)
    (tmp_path / "a.py").write_bytes(ORIGINAL)
    sub = tmp_path / "sub"
    sub.mkdir()
    os.mkfifo(sub / ".gitignore")  # read as a file, it would block the run
    (sub / "b.py").write_bytes(ORIGINAL)
    result = run_lintloop("check", "--select", SELECT, "--no-cache", "--format", "concise", ".", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert sorted({line.split(":")[0] for line in result.stdout.splitlines()}) == ["a.py", "sub/b.py"]
    assert result.stderr == ""
