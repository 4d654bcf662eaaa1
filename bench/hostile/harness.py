"""The hostile generator's harness: one case is a sandbox (a project, a home, a folder outside both), one
`lintloop` command run in the project as a new process, and the invariants every run must keep.

    sandbox/
      project/   the working tree lintloop runs in (its cwd): the case's files
      home/      $HOME and $XDG_CACHE_HOME's parent: what lintloop may keep per user
      outside/   files the project must never change (links in the project may point here)

Invariants checked on every case (`Outcome.failures`), whatever the case also asks:
- the process ends by itself within the case's time limit, by no signal, with an exit status the
  case allows (default 0 or 1), and no process of its session is left behind, nor any that holds the
  case's mark (`MARK_VARIABLE`, in the environment every process it starts inherits; a case whose
  processes drop their environment passes the mark in their arguments), still running `LEFT_GRACE_S`
  after it (a helper that is ending, as a fork server finishing its imports, is not left behind);
- no traceback and no "internal error" in its output;
- nothing it printed holds a control character (ESC, BEL, C1, ...) but newline and tab;
- nothing outside `project/` and `home/.cache/lintloop/` changed; inside `project/`, only what the
  case lets change (`writes`: e.g. `fix`'s targets) and `.lintloop_cache/`;
- the largest process stayed within the case's memory bound (`max_rss_mib`), and the session never held
  more processes at once than the case allows (`max_processes`).

A category module (`bench/hostile/<category>.py`) defines CATEGORY, DESCRIPTION and
`cases(quick: bool) -> list[Case]`; `run.py` runs them all, tests/test_hostile.py their quick lists.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

LINTLOOP = [sys.executable, "-m", "lintloop"]  # the lintloop this interpreter imports
# The console script beside this interpreter (what pre-commit, editors and users run): `python -m` puts
# the working directory first on the module path, which the script does not.
SCRIPT = [str(Path(sys.executable).with_name("lintloop"))]
# How long a process of the run's session may outlive it: `lintloop server` exiting right after
# `initialized` leaves the fork server it started importing the engine; it ends once its imports are done.
LEFT_GRACE_S = 5.0
MARK_VARIABLE = "HOSTILE_CASE_MARK"  # in lintloop's environment: a text naming the case's run


@dataclass(frozen=True)
class Link:
    """A symbolic link to `target` (relative to the link's folder, or absolute; `{sandbox}` is replaced)."""

    target: str


@dataclass(frozen=True)
class HardLink:
    """A hard link to another file of the sandbox (a path relative to the sandbox)."""

    target: str


Content = Union[str, bytes, Link, HardLink, None]  # None: a directory


@dataclass
class Outcome:
    """What one run did."""

    case: Case
    exit_code: int
    stdout: bytes
    stderr: bytes
    seconds: float
    max_rss_mib: float
    changed: dict[str, str]  # sandbox-relative path -> "created" / "changed" / "removed"
    left_running: list[int]
    most_processes: int  # the most processes its session held at once (sampled)
    timed_out: bool
    sandbox: Path  # removed once the run is over, unless kept: `written` holds what a check may read of it
    extra: list[str] = field(default_factory=list)
    written: dict[str, bytes] = field(default_factory=dict)  # the case's `writes` files the run changed, as left

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def failures(self) -> list[str]:
        found = []
        if self.timed_out:
            found.append(f"did not end within {self.case.timeout:g} s")
        elif self.exit_code < 0:
            found.append(f"killed by signal {signal.Signals(-self.exit_code).name}")
        elif self.exit_code not in self.case.exits:
            found.append(f"exit {self.exit_code}, expected one of {sorted(self.case.exits)}")
        if self.left_running:
            found.append(f"left {len(self.left_running)} process(es) running: {self.left_running}")
        text = self.out + self.err
        if "Traceback (most recent call last)" in text or "internal error" in text:
            found.append("internal error or traceback: " + _excerpt(self.err or self.out))
        if self.case.plain_output:
            control = _CONTROL.search(text)
            if control:
                found.append(f"printed control character {control[0]!r}: " + _excerpt(text, control.start()))
        for path, how in sorted(self.changed.items()):
            if not self.case.may_change(path):
                found.append(f"{how} {path}")
        if self.case.max_processes is not None and self.most_processes > self.case.max_processes:
            found.append(f"ran {self.most_processes} processes at once > {self.case.max_processes}")
        if self.case.max_rss_mib is not None and self.max_rss_mib > self.case.max_rss_mib:
            found.append(f"peak memory {self.max_rss_mib:.0f} MiB > {self.case.max_rss_mib:g} MiB")
        if self.case.expect is not None and not found:
            problem = self.case.expect(self)
            if problem:
                found.append(problem)
        return found + self.extra


@dataclass
class Case:
    """One hostile input and the command that meets it."""

    category: str
    name: str
    files: dict[str, Content]  # sandbox-relative ("project/train.py", "outside/x.py", "home/...")
    argv: list[str]  # lintloop's arguments, run in `project/`
    exits: frozenset[int] = frozenset({0, 1})
    writes: tuple[str, ...] = ()  # sandbox-relative paths (or fnmatch patterns) the run may change
    expect: Callable[[Outcome], str | None] | None = None  # a further check: a failure's text, or None
    stdin: bytes = b""
    env: dict[str, str] = field(default_factory=dict)  # `{sandbox}` in a value is replaced
    timeout: float = 60.0
    max_rss_mib: float | None = None
    max_processes: int | None = None
    script: bool = False  # run the console script (SCRIPT), not `python -m lintloop`
    plain_output: bool = True  # no control character in what it prints
    setup: Callable[[Path], None] | None = None  # after the files are made: the sandbox

    @property
    def id(self) -> str:
        return f"{self.category}/{self.name}"

    def may_change(self, path: str) -> bool:
        if path.startswith(("project/.lintloop_cache/", "home/.cache/lintloop/")) or path in (
                "project/.lintloop_cache", "home/.cache", "home/.cache/lintloop"):
            return True
        return any(_matches(path, pattern) for pattern in self.writes)


def _matches(path: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern)


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def _excerpt(text: str, at: int = 0) -> str:
    piece = text[max(0, at - 60):at + 140]
    return repr(piece)


def make_sandbox(case: Case, root: Path) -> Path:
    sandbox = root / "sandbox"
    for folder in ("project", "home/.cache", "outside"):
        (sandbox / folder).mkdir(parents=True, exist_ok=True)
    for relative, content in case.files.items():
        path = sandbox / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.mkdir(exist_ok=True)
        elif isinstance(content, Link):
            os.symlink(content.target.replace("{sandbox}", str(sandbox)), path)
        elif isinstance(content, HardLink):
            os.link(sandbox / content.target, path)
        else:
            path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    if case.setup is not None:
        case.setup(sandbox)
    return sandbox


def snapshot(sandbox: Path) -> dict[str, tuple]:
    """Each entry of the sandbox (links not followed): its kind and content digest or link target."""
    state: dict[str, tuple] = {}
    for folder, directories, files in os.walk(sandbox):
        for name in directories + files:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, sandbox)
            info = os.lstat(path)
            if os.path.islink(path):
                state[relative] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                state[relative] = ("dir", info.st_mode)
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    state[relative] = ("file", info.st_mode, hashlib.sha256(handle.read()).hexdigest())
            else:
                state[relative] = ("other", info.st_mode)
    return state


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> dict[str, str]:
    changed = {}
    for path in before.keys() | after.keys():
        if path not in after:
            changed[path] = "removed"
        elif path not in before:
            changed[path] = "created"
        elif before[path][0] != after[path][0] or (before[path] != after[path] and before[path][0] != "dir"):
            changed[path] = "changed"  # (a folder whose mode changed aside)
    return changed


def session_processes(session: int) -> list[int]:
    """The live processes of a session (Linux /proc; empty elsewhere)."""
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        if fields[0] not in (b"Z", b"X") and int(fields[3]) == session:
            found.append(int(entry.name))
    return found


def _count_processes(session: int, counts: list[int], done: threading.Event) -> None:
    while not done.wait(0.05):
        counts.append(len(session_processes(session)))


def marked_processes(mark: str) -> list[int]:
    """The live processes whose environment or arguments hold `mark` (Linux /proc; empty elsewhere)."""
    needle, found = mark.encode(), []
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            held = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2:].split()[0] not in (b"Z", b"X") and needle in held:
            found.append(int(entry.name))
    return found


def _left_behind(session: int, mark: str) -> list[int]:
    """The processes of the session and those that hold the case's mark."""
    found = session_processes(session)
    return found + [pid for pid in marked_processes(mark) if pid not in found]


def run_case(case: Case, command: list[str] | None = None, keep: Path | None = None) -> Outcome:
    """Run one case in a fresh sandbox (removed afterwards unless `keep` names a folder for it)."""
    root = Path(tempfile.mkdtemp(prefix="lintloop-hostile-")) if keep is None else keep
    try:
        sandbox = make_sandbox(case, root)
        before = snapshot(sandbox)
        home = sandbox / "home"
        env = {key: value for key, value in os.environ.items() if not key.startswith(("LINTLOOP", "XDG_", "COLUMNS"))}
        mark = f"hostile-{uuid.uuid4().hex}"
        # Each case is one run of lintloop's own: no warm engine (lintloop.warm_engine), a process meant to
        # outlive the run (tests/test_warm_engine.py), as CI runs it.
        env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), PYTHONDONTWRITEBYTECODE="1",
                   LINTLOOP_WARM_ENGINE="0",
                   **{key: value.replace("{sandbox}", str(sandbox)) for key, value in case.env.items()})
        env[MARK_VARIABLE] = mark
        usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        program = command or (SCRIPT if case.script else LINTLOOP)
        process = subprocess.Popen([*program, *case.argv], cwd=sandbox / "project", env=env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True)
        counts = [1]
        counting = threading.Event()
        counter = threading.Thread(target=_count_processes, args=(process.pid, counts, counting), daemon=True)
        counter.start()
        timed_out = False
        try:
            stdout, stderr = process.communicate(case.stdin, timeout=case.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        counting.set()
        counter.join()
        seconds = time.monotonic() - started
        left = _left_behind(process.pid, mark)
        grace_ends = time.monotonic() + LEFT_GRACE_S
        while left and time.monotonic() < grace_ends:
            time.sleep(0.05)
            left = _left_behind(process.pid, mark)
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        # ru_maxrss of children is the largest ever waited for: a new maximum is this run's.
        rss_kib = usage.ru_maxrss if usage.ru_maxrss > usage_before.ru_maxrss else 0
        after = snapshot(sandbox)
        changed = changes(before, after)
        written = {path: (sandbox / path).read_bytes() for path, how in changed.items()
                   if how != "removed" and after[path][0] == "file"
                   and any(_matches(path, pattern) for pattern in case.writes)}
        return Outcome(case, process.returncode, stdout, stderr, seconds, rss_kib / 1024, changed, left,
                       max(counts), timed_out, sandbox, written=written)
    finally:
        if keep is None:
            _remove(root)


def _remove(root: Path) -> None:
    for folder, directories, _ in os.walk(root):  # a case may leave folders without write permission
        for name in directories:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)
    shutil.rmtree(root, ignore_errors=True)


def categories() -> dict[str, object]:
    """The category modules of this folder, by CATEGORY."""
    import importlib.util

    found = {}
    folder = str(Path(__file__).parent)
    if folder not in sys.path:  # the category modules import this one as `harness`
        sys.path.insert(0, folder)
    for path in sorted(Path(__file__).parent.glob("*.py")):
        if path.stem in ("harness", "run", "__init__"):
            continue
        spec = importlib.util.spec_from_file_location(f"hostile_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        found[module.CATEGORY] = module
    return found


def all_cases(quick: bool, only: Iterable[str] = ()) -> list[Case]:
    wanted = set(only)
    return [case for name, module in categories().items() if not wanted or name in wanted
            for case in module.cases(quick)]
