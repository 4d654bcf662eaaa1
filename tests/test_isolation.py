"""One file's analysis never takes down a run (issue 22, item 1): in a worker pool, an item whose work
crashes (a signal), never ends, exhausts memory or raises costs only itself; its worker is replaced, the
other items' results all arrive. Driven through `WorkerPool` with functions that fail on purpose, and
end to end through `lintloop check` / `fix` with a linter that fails on chosen files."""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import pytest

import lintloop.cli
import lintloop.linter
from lintloop.isolation import AnalysisError, AnalysisFailed, Limits, WorkerPool, deep_recursion, gc_paused
from lintloop.server.workers import IsolatedExecutor

FIXTURES = Path(__file__).parent / "fixtures"
NO_LIMITS = Limits(None, None)


def behave(item: str) -> str:
    """What each test item does in a worker: `ok:x` returns x; the others fail as their name says."""
    kind, _, value = item.partition(":")
    if kind == "segv":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if kind == "abort":
        os.abort()
    if kind == "exit":
        os._exit(3)
    if kind == "hang":
        while True:
            time.sleep(0.01)
    if kind == "spin":
        while True:
            pass
    if kind == "hog":
        hoard = []
        while True:
            hoard.append(bytearray(16 * 1024 * 1024))
            hoard[-1][::4096] = b"x" * len(range(0, 16 * 1024 * 1024, 4096))  # touch every page
    if kind == "raise":
        raise ValueError(value)
    if kind == "nomem":
        raise MemoryError
    if kind == "deep":  # recursion far past the default limit: fine in a worker's big-stack thread
        def down(n: int) -> int:
            return 0 if n == 0 else 1 + down(n - 1)

        with deep_recursion():
            return str(down(int(value)))
    if kind == "limit":
        return str(sys.getrecursionlimit())
    if kind == "pid":
        return str(os.getpid())
    if kind == "gc":  # whether the cyclic GC runs while an item does
        return f"{'on' if gc.isenabled() else 'off'} {value}"
    return value


def run_pool(items: list[str], workers: int = 2, limits: Limits = NO_LIMITS, chunk: int = 3) -> dict[int, object]:
    outcomes: dict[int, object] = {}
    with WorkerPool(workers, limits) as pool:
        pool.run(behave, items, chunk, outcomes.__setitem__)
    assert sorted(outcomes) == list(range(len(items))), "every item gets exactly one outcome"
    return outcomes


@pytest.mark.parametrize("workers", [1, 2])
def test_a_crashing_item_fails_alone_and_every_other_item_is_answered(workers):
    items = ["ok:a", "ok:b", "segv", "ok:c", "abort", "ok:d", "exit", "ok:e", "ok:f"]
    outcomes = run_pool(items, workers)
    assert [outcomes[i] for i in (0, 1, 3, 5, 7, 8)] == ["a", "b", "c", "d", "e", "f"]
    assert isinstance(outcomes[2], AnalysisFailed) and outcomes[2].cause.startswith("crashed with SIGSEGV")
    assert isinstance(outcomes[4], AnalysisFailed) and outcomes[4].cause.startswith("crashed with SIGABRT")
    assert isinstance(outcomes[6], AnalysisFailed) and outcomes[6].cause == "ended with exit status 3"


def test_an_item_over_its_time_is_stopped_and_the_rest_of_its_chunk_still_runs():
    started = time.monotonic()
    outcomes = run_pool(["ok:a", "hang", "ok:b", "spin", "ok:c"], workers=2, limits=Limits(0.5, None), chunk=5)
    assert time.monotonic() - started < 10
    assert [outcomes[i] for i in (0, 2, 4)] == ["a", "b", "c"]
    for index in (1, 3):
        assert isinstance(outcomes[index], AnalysisFailed)
        assert outcomes[index].cause == "took longer than 0.5 s (the file-timeout setting)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the memory limit is read from /proc")
def test_an_item_over_the_memory_limit_is_stopped():
    outcomes = run_pool(["ok:a", "hog", "ok:b"], workers=1, limits=Limits(None, 300))
    assert [outcomes[0], outcomes[2]] == ["a", "b"]
    assert isinstance(outcomes[1], AnalysisFailed)
    assert outcomes[1].cause == "used more than 300 MiB of memory (the file-memory-limit setting)"


def test_errors_are_reported_per_item_and_a_memory_error_restarts_the_worker():
    outcomes = run_pool(["pid:", "raise:boom", "pid:", "nomem", "pid:", "ok:z"], workers=1, chunk=6)
    assert isinstance(outcomes[1], AnalysisError) and outcomes[1].message == "ValueError: boom"
    assert "Traceback" in outcomes[1].details
    assert outcomes[0] == outcomes[2], "an exception does not cost the worker"
    assert isinstance(outcomes[3], AnalysisFailed) and outcomes[3].cause == "ran out of memory"
    assert outcomes[4] != outcomes[2], "after a MemoryError the rest runs in a fresh worker"
    assert outcomes[5] == "z"


def test_workers_recurse_deeply_where_asked_and_keep_the_default_limit_elsewhere():
    default = str(sys.getrecursionlimit())
    assert run_pool(["deep:100000", "limit:"], workers=1) == {0: "100000", 1: default}


def test_the_cyclic_gc_pauses_while_an_item_runs_and_is_restored_after_it():
    outcomes = run_pool(["gc:a", "raise:x", "gc:b"], workers=1)
    assert (outcomes[0], outcomes[2]) == ("off a", "off b"), "paused for each item, after a failed one too"
    gc_before = gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() == gc_before
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled(), "a GC paused by someone else stays paused"
    finally:
        gc.enable() if gc_before else None


def test_a_pool_whose_workers_die_at_start_says_so(monkeypatch):
    monkeypatch.setattr("lintloop.isolation._serve", lambda connection, slot: os._exit(5))
    with pytest.raises(RuntimeError, match="keep failing at start"):
        run_pool(["ok:a"], workers=1)


def test_closing_the_pool_leaves_no_worker_running():
    with WorkerPool(2, NO_LIMITS) as pool:
        pool.run(behave, ["pid:"] * 10, 1, lambda *_: None)
        pids = [w.process.pid for w in pool._idle]
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _refuse_to_unpickle() -> None:
    raise RuntimeError("no unpickling here")


class Unreadable:
    """Pickles in the parent; unpickling it in the worker raises."""

    def __reduce__(self):
        return _refuse_to_unpickle, ()


def test_a_chunk_the_worker_cannot_read_fails_its_items_and_the_worker_goes_on():
    runs: list[dict[int, object]] = [{}, {}, {}]
    with WorkerPool(1, NO_LIMITS) as pool:
        # Eight items for one worker: the first chunk holds two (a quarter of what is left), the rest one each.
        for outcomes, items in zip(runs, (["pid:"], [Unreadable()] + ["ok:b"] * 7, ["pid:"])):
            pool.run(behave, items, 2, outcomes.__setitem__)
    assert all(isinstance(runs[1][index], AnalysisError) and "RuntimeError: no unpickling here" in runs[1][index].message
               for index in (0, 1)), "the chunk fails as a whole"
    assert [runs[1][index] for index in range(2, 8)] == ["b"] * 6
    assert runs[0] == runs[2], "the same worker still serves"


def test_workers_end_when_their_parent_is_killed(tmp_path):
    (tmp_path / "endless.py").write_text("import torch\n")
    script = (f"import lintloop.linter as r\n"
              f"def endless(*args, **kwargs):\n    while True:\n        pass\n"
              f"r.lint_bytes = endless\n"
              f"from lintloop.cli import main\n"
              f"main(['check', '--no-cache', '--file-timeout', '0', '--jobs', '1', {str(tmp_path / 'endless.py')!r}])\n")
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        workers: list[int] = []
        while not workers and time.monotonic() < deadline:
            time.sleep(0.1)
            workers = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent_of(int(p.name)) == parent.pid]
        assert workers, "the run started no worker"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{pid}").exists() and _parent_of(pid) is not None for pid in workers) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if Path(f"/proc/{pid}").exists() and _state(pid) not in ("Z", None)]
    finally:
        parent.kill()


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def _state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def test_the_isolated_executor_survives_its_calls():
    executor = IsolatedExecutor(Limits(1, None), context=None)
    try:
        assert executor.submit(behave, "ok:a").result(timeout=30) == "a"
        with pytest.raises(AnalysisFailed, match="SIGSEGV"):
            executor.submit(behave, "segv").result(timeout=30)
        with pytest.raises(AnalysisFailed, match="longer than 1 s"):
            executor.submit(behave, "spin").result(timeout=30)
        with pytest.raises(AnalysisError, match="ValueError: no"):
            executor.submit(behave, "raise:no").result(timeout=30)
        assert executor.submit(behave, "ok:b").result(timeout=30) == "b"
        with pytest.raises(AnalysisFailed, match="longer than 0.3 s"):  # a call's own limits
            executor.submit_within(Limits(0.3, None), behave, "spin").result(timeout=30)
    finally:
        executor.shutdown()


# ----- end to end -------------------------------------------------------------------------------


def failing(real):
    """`real` (lint_bytes or fix_text), failing as the file's name says: crash_*.py, hang_*.py, raise_*.py."""
    def analyse(display, *args, **kwargs):
        name = Path(display).name
        if name.startswith("crash"):
            os.kill(os.getpid(), signal.SIGSEGV)
        if name.startswith("hang"):
            while True:
                pass
        if name.startswith("raise"):
            raise KeyError("bug")
        return real(display, *args, **kwargs)

    return analyse


@pytest.fixture
def mixed_tree(tmp_path, monkeypatch):
    for name in ("lint_bytes", "fix_text"):
        monkeypatch.setattr(lintloop.linter, name, failing(getattr(lintloop.linter, name)))
    bad = (FIXTURES / "LL301_bad.py").read_text()
    for name in ("a_ok.py", "crash_1.py", "b_ok.py", "hang_1.py", "c_ok.py", "crash_2.py", "d_ok.py"):
        (tmp_path / name).write_text(bad)
    return tmp_path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_check_reports_failed_files_as_not_analysed_and_prints_every_other_finding(mixed_tree, run_cli, jobs):
    started = time.monotonic()
    code, out, err = run_cli("check", "--no-cache", "--format", "concise", "--jobs", jobs, "--file-timeout", "1",
                             ".", cwd=mixed_tree)
    assert time.monotonic() - started < 30
    assert code == 1, err
    lines = out.splitlines()
    assert sorted({line.split(":")[0] for line in lines if " LL301 " in line}) == ["a_ok.py", "b_ok.py", "c_ok.py",
                                                                                   "d_ok.py"]
    not_analysed = {line.split(":")[0]: line for line in lines if " LL004 " in line}
    assert sorted(not_analysed) == ["crash_1.py", "crash_2.py", "hang_1.py"]
    assert "not analysed: its analysis crashed with SIGSEGV" in not_analysed["crash_1.py"]
    assert "not analysed: its analysis took longer than 1 s (the file-timeout setting)" in not_analysed["hang_1.py"]
    assert err == ""


def test_a_bug_in_one_file_is_an_internal_error_for_that_file_only(mixed_tree, run_cli):
    (mixed_tree / "raise_1.py").write_text((mixed_tree / "a_ok.py").read_text())  # analysed where it is found
    code, out, err = run_cli("check", "--no-cache", "--format", "concise", "--file-timeout", "1", ".",
                             cwd=mixed_tree)
    assert code == 2
    assert "lintloop: error: raise_1.py: internal error: KeyError: 'bug'" in err
    assert out.count(" LL301 ") == 4
    code, _, err = run_cli("check", "--no-cache", "--verbose", "raise_1.py", cwd=mixed_tree)
    assert code == 2 and "Traceback" in err and "KeyError" in err


def test_fix_leaves_a_failed_file_unchanged_and_fixes_the_others(mixed_tree, run_cli):
    before = (mixed_tree / "crash_1.py").read_bytes()
    code, out, err = run_cli("fix", "--unsafe-fixes", "--no-cache", "--format", "concise", "--file-timeout", "1",
                             ".", cwd=mixed_tree)
    assert (mixed_tree / "crash_1.py").read_bytes() == before
    assert (mixed_tree / "a_ok.py").read_bytes() != before, "the ordinary files are fixed"
    assert "crash_1.py:1:1: LL004 not analysed: its analysis crashed with SIGSEGV" in out
    assert "the file is unchanged" in out


@pytest.mark.parametrize("option, value, problem", [("--file-timeout", "-1", "must be 0 or more"),
                                                    ("--file-timeout", "nan", "must be 0 or more"),
                                                    ("--file-memory-limit", "lots", "not a number")])
def test_the_limits_are_options_and_zero_lifts_them(capsys, option, value, problem):
    with pytest.raises(SystemExit) as exited:
        lintloop.cli.main(["check", option, value, "."])
    assert exited.value.code == 2 and problem in capsys.readouterr().err
    assert Limits.configured(0, 0) == Limits(None, None)
    assert Limits.configured(None, None) == Limits()
    assert Limits.configured(2.5, 100) == Limits(2.5, 100)


def test_the_limits_come_from_the_configuration_and_the_command_line_wins(mixed_tree, run_cli):
    (mixed_tree / "lintloop.toml").write_text("file-timeout = 0.5\n")
    started = time.monotonic()
    code, out, _ = run_cli("check", "--no-cache", "--format", "concise", "hang_1.py", cwd=mixed_tree)
    assert code == 1 and "took longer than 0.5 s" in out and time.monotonic() - started < 20
    code, out, _ = run_cli("check", "--no-cache", "--format", "concise", "--file-timeout", "1", "hang_1.py",
                           cwd=mixed_tree)
    assert code == 1 and "took longer than 1 s" in out
    (mixed_tree / "lintloop.toml").write_text("file-memory-limit = -1\n")
    code, _, err = run_cli("check", "hang_1.py", cwd=mixed_tree)
    assert code == 2 and "lintloop.toml:1: file-memory-limit: must be 0 (no limit) or more" in err


def test_the_not_analysed_rule_documents_the_default_bounds():
    from lintloop.isolation import DEFAULT_MEMORY_MIB, DEFAULT_SECONDS
    from lintloop.rules import BY_CODE

    remedy = BY_CODE["LL004"].remedy
    assert f"default {DEFAULT_SECONDS:g})" in remedy and f"default {DEFAULT_MEMORY_MIB})" in remedy


def test_chunks_shrink_as_the_work_runs_out():
    """Guided scheduling: full chunks while much is left, then smaller ones, the last of one item."""
    with WorkerPool(2, NO_LIMITS) as pool:
        unsent = deque(enumerate(range(200)))
        sizes = []
        while unsent:
            sizes.append(len(pool._next_chunk(unsent, 16)))
    assert sum(sizes) == 200 and sizes[0] == 16 and sizes[-4:] == [1, 1, 1, 1]
    assert sizes == sorted(sizes, reverse=True)
