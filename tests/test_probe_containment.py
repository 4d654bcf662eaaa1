"""Probe faults and containment (issue 14, item 5): a program that loops, exhausts memory, kills
itself, leaves workers hanging, floods its output or writes files is stopped within the probe's
limits, reported for what it did, and leaves no process behind; `check` and `fix` without
`--probe` never run the user's code.

Targets are plain Python (no framework), except the one `check --probe` run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lintloop.runtime_probe.runner import run_probe

LINTLOOP = [sys.executable, "-m", "lintloop"]
FIXTURES = Path(__file__).parent / "fixtures"


def _write(directory: Path, name: str, source: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie has ended: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:].split()[0] not in (b"Z", b"X")


def _recorded_pids(directory: Path) -> list[int]:
    """The pids the target's processes wrote into `directory` (one file each, named by its pid)."""
    return [int(p.name) for p in directory.iterdir()]


def _assert_none_running(pids: list[int]) -> None:
    deadline = time.monotonic() + 2  # reaping by init is asynchronous
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in pids if _running(pid)] == []


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc")


def test_a_program_that_never_ends_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    script = _write(tmp_path, "spin.py", """
        print("spinning", flush=True)
        while True:
            pass
    """)
    run = run_probe(script, [], timeout=1.5)
    assert run.timed_out and not run.killed_for_memory
    assert 1.5 <= run.duration < 4
    assert "spinning" in run.stdout_tail


def test_a_program_over_the_memory_limit_is_killed_and_reported_as_such(tmp_path: Path) -> None:
    script = _write(tmp_path, "hog.py", """
        import time
        hoard = []
        while True:
            hoard.append(bytearray(16 * 2**20))  # touched: resident, not only reserved
            time.sleep(0.02)
    """)
    run = run_probe(script, [], timeout=30, memory_limit_mb=160)
    assert run.killed_for_memory and not run.timed_out
    assert run.peak_memory_mb is not None and run.peak_memory_mb > 160
    assert run.memory_limit_mb == 160
    assert run.duration < 10


@pytest.mark.parametrize(("ending", "returncode", "signal_name"), [
    ("os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL, "SIGKILL"),
    ("os.kill(os.getpid(), signal.SIGSEGV)", -signal.SIGSEGV, "SIGSEGV"),
    ("os._exit(7)", 7, None),
])
def test_a_program_that_kills_itself_is_reported(tmp_path: Path, ending: str, returncode: int,
                                                 signal_name: str | None) -> None:
    script = _write(tmp_path, "suicide.py", f"""
        import os, signal
        print("before", flush=True)
        {ending}
    """)
    run = run_probe(script, [], timeout=20)
    assert (run.returncode, run.signal_name) == (returncode, signal_name)
    assert not run.timed_out and not run.killed_for_memory
    assert "before" in run.stdout_tail


# Every process of the target records its pid in PIDS (argv[1]) and then hangs.
_HANGING_WORKERS = """
    import multiprocessing, os, signal, sys, time

    PIDS = sys.argv[1]

    def hang(name):
        open(os.path.join(PIDS, str(os.getpid())), "w").close()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(1)

    def escape():
        if os.fork() == 0:
            os.setsid()  # leaves the probe's process group and session
            if os.fork() == 0:  # a daemon, orphaned: reparented away from the program
                hang("daemon")
            os._exit(0)

    if __name__ == "__main__":
        open(os.path.join(PIDS, str(os.getpid())), "w").close()
        for method in ("fork", "spawn"):
            multiprocessing.get_context(method).Process(target=hang, args=(method,)).start()
        if os.fork() == 0:
            hang("plain fork")
        escape()
        while len(os.listdir(PIDS)) < 5:
            time.sleep(0.05)
        if sys.argv[2] == "exit":
            os._exit(0)  # leaves every worker behind
        while True:  # waits for workers that never end
            time.sleep(1)
"""


@needs_proc
@pytest.mark.parametrize("ending", ["exit", "timeout"])
def test_no_process_of_the_program_survives_the_run(tmp_path: Path, ending: str) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    script = _write(tmp_path, "workers.py", _HANGING_WORKERS)
    run = run_probe(script, [str(pids), ending], timeout=20 if ending == "exit" else 4)
    recorded = _recorded_pids(pids)
    assert len(recorded) == 5, run.stderr_tail  # main, fork and spawn workers, plain fork, daemon
    assert run.timed_out is (ending == "timeout")
    assert run.left_running >= 4
    assert run.duration < (10 if ending == "exit" else 12)
    _assert_none_running(recorded)


# Issue 22, defect 7: a process that forks twice, leaves the session and the group (`setsid`) and drops the
# run's token (`execve` with an empty environment) is out of reach of every scan but the supervisor's
# subreaper.  ESCAPEE (argv: PIDS MODE DEPTH) records its pid in PIDS, then in MODE "sleep" sleeps; "reexec"
# execs itself again and again (the same pid, a new program each time); "allocate" fills memory; with
# DEPTH > 1 it first escapes once more itself, the next one DEPTH - 1 (a chain of escapees, all running).
_ESCAPEE = """
    import os, sys, time

    PIDS, MODE, DEPTH = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def escape(mode, depth):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execve(sys.executable, [sys.executable, __file__, PIDS, mode, str(depth)], {})
            os._exit(0)
        os.wait()

    open(os.path.join(PIDS, str(os.getpid())), "w").close()
    if DEPTH > 1:
        escape(MODE, DEPTH - 1)
    if MODE == "reexec":
        time.sleep(0.05)
        os.execve(sys.executable, [sys.executable, __file__, PIDS, MODE, "1"], {})
    hoard = []
    while True:
        if MODE == "allocate" and len(hoard) < 40:
            hoard.append(bytearray(16 * 2**20))  # touched: resident, not only reserved
        time.sleep(0.02)
"""

# The program (argv: PIDS WHEN MODE DEPTH): starts the escapee WHEN "at_once" and exits as soon as it has
# recorded its pid(s), or "later" (0.5 s in) and then runs on until the timeout.
_ESCAPING_PROGRAM = """
    import os, sys, time

    PIDS, WHEN, MODE, DEPTH = sys.argv[1:]
    ESCAPEE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "escapee.py")
    if WHEN == "later":
        time.sleep(0.5)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, ESCAPEE, PIDS, MODE, DEPTH], {})
        os._exit(0)
    os.wait()
    while len(os.listdir(PIDS)) < int(DEPTH):
        time.sleep(0.02)
    print("escaped", flush=True)
    while WHEN == "later":
        time.sleep(1)
"""


def _escaping_program(directory: Path) -> tuple[Path, Path]:
    """The program and the folder its escapees record their pids in."""
    _write(directory, "escapee.py", _ESCAPEE)
    pids = directory / "pids"
    pids.mkdir()
    return _write(directory, "escaping.py", _ESCAPING_PROGRAM), pids


def _command_line(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _gone(pid: int) -> bool:
    """Whether the escapee `pid` has ended and been reaped: no zombie, whoever's child (the number may
    since have gone to another program)."""
    if not os.path.exists(f"/proc/{pid}"):
        return True
    return _running(pid) and b"escapee.py" not in _command_line(pid)  # a zombie's command line is empty


@needs_proc
@pytest.mark.parametrize(("when", "mode", "depth"), [
    ("at_once", "sleep", 1),  # the defect as measured
    ("later", "sleep", 1),  # started while the program runs; the run ends at the timeout
    ("at_once", "reexec", 1),  # a new program in the same process, again and again
    ("later", "sleep", 6),  # escapees that escape in turn, all running
])
def test_a_process_that_left_the_group_and_dropped_the_environment_is_killed_and_named(
        tmp_path: Path, when: str, mode: str, depth: int) -> None:
    script, pids = _escaping_program(tmp_path)
    run = run_probe(script, [str(pids), when, mode, str(depth)], timeout=20 if when == "at_once" else 3)
    assert "escaped" in run.stdout_tail, run.stderr_tail
    assert (run.returncode, run.timed_out) == ((0, False) if when == "at_once" else (-signal.SIGKILL, True))
    escapees = _recorded_pids(pids)
    assert len(escapees) == depth
    # Gone, not waiting to be reaped by init: the probe's supervisor reaped it before the probe returned.
    assert [pid for pid in escapees if not _gone(pid)] == []
    named = {e["pid"]: e for e in run.of_type("left_running")}
    assert sorted(named) == sorted(escapees) and run.left_running == depth
    assert all(named[pid]["command"][1] == str(tmp_path / "escapee.py") for pid in escapees)
    assert run.duration < (5 if when == "at_once" else 8)  # no wait for pipes an escapee held open


@needs_proc
def test_the_json_report_names_the_escaped_process(tmp_path: Path) -> None:
    script, pids = _escaping_program(tmp_path)
    result = subprocess.run([*LINTLOOP, "probe", str(script), "--format", "json", "--", str(pids), "at_once",
                             "sleep", "1"], capture_output=True, text=True, timeout=60)
    [escapee] = _recorded_pids(pids)
    assert _gone(escapee)
    data = json.loads(result.stdout)
    assert data["returncode"] == 0 and data["left_running"] == 1, result.stderr
    [named] = [e for e in data["events"] if e["type"] == "left_running"]
    assert named["pid"] == escapee and named["command"][1:] == [str(tmp_path / "escapee.py"), str(pids), "sleep", "1"]


@needs_proc
def test_the_memory_limit_counts_an_escaped_process(tmp_path: Path) -> None:
    script, pids = _escaping_program(tmp_path)
    run = run_probe(script, [str(pids), "later", "allocate", "1"], timeout=30, memory_limit_mb=160)
    assert run.killed_for_memory and not run.timed_out, run.stderr_tail
    assert run.peak_memory_mb is not None and run.peak_memory_mb > 160
    [escapee] = _recorded_pids(pids)
    assert _gone(escapee) and [e["pid"] for e in run.of_type("left_running")] == [escapee]
    assert run.duration < 15


@needs_proc
def test_a_run_whose_lintloop_is_killed_leaves_nothing_running(tmp_path: Path) -> None:
    """The supervisor ends the run when lintloop's end of their socket closes, however lintloop ended."""
    script, pids = _escaping_program(tmp_path)
    probe = subprocess.Popen([sys.executable, "-c", "import sys, pathlib\n"
                              "from lintloop.runtime_probe.runner import run_probe\n"
                              "run_probe(pathlib.Path(sys.argv[1]), sys.argv[2:], timeout=60)",
                              str(script), str(pids), "later", "sleep", "1"])
    try:
        deadline = time.monotonic() + 30
        while not _recorded_pids(pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        run = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
               if str(tmp_path).encode() in _command_line(pid) and pid != probe.pid]
    finally:
        probe.kill()
        probe.wait()
    assert len(run) == 3  # the supervisor, the main process, the escapee
    _assert_none_running(run)


def test_a_well_behaved_program_runs_as_before(tmp_path: Path) -> None:
    """The supervisor between lintloop and the program changes nothing the program sees or reports: it
    leads a session and a process group of its own, holds the run's token, reads /dev/null, and its workers
    come and go with nothing left to report."""
    script = _write(tmp_path, "good.py", """
        import multiprocessing, os, sys
        if __name__ == "__main__":
            with multiprocessing.get_context("fork").Pool(2) as pool:
                total = sum(pool.map(abs, range(-5, 5)))
            print(total, os.getsid(0) == os.getpgid(0) == os.getpid(), "LINTLOOP_PROBE_RUN" in os.environ,
                  sys.stdin.read() == "", flush=True)
            print("to stderr", file=sys.stderr)
            sys.exit(3)
    """)
    run = run_probe(script, [], timeout=20)
    assert (run.returncode, run.timed_out, run.killed_for_memory, run.left_running) == (3, False, False, 0)
    assert run.stdout_tail == "25 True True True\n" and run.stderr_tail == "to stderr\n"
    assert [e["type"] for e in run.events] == ["start", "stop"]
    assert run.events[0]["root"] is True and run.events[0]["argv"] == [str(script)]


def test_a_flood_of_output_keeps_lintloop_bounded_and_its_report_intact(tmp_path: Path) -> None:
    script = _write(tmp_path, "flood.py", """
        import sys
        line = "x" * 1023 + "\\n"
        for _ in range(25 * 1024):  # 25 MiB on each stream, interleaved
            sys.stdout.write(line)
            sys.stderr.write(line)
        print("END-OUT")
        print("END-ERR", file=sys.stderr)
    """)
    report = tmp_path / "report.json"
    result = subprocess.run([*LINTLOOP, "probe", str(script), "--format", "json", "--output", str(report)],
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == b""
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["output_bytes"] >= 50 * 2**20
    assert data["returncode"] == 0 and not data["timed_out"]
    assert data["stderr_tail"].endswith("END-ERR\n")
    assert len(data["stderr_tail"]) <= 4000
    assert data["duration_s"] < 30


def test_the_files_a_program_writes_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _write(tmp_path, "writer.py", """
        import os, pathlib, shutil
        with open("out.txt", "w") as fh:
            fh.write("x")
        pathlib.Path("run").mkdir(exist_ok=True)  # run twice: by run_probe, then by the command line
        pathlib.Path("run/a.bin").write_bytes(b"1")
        os.replace("run/a.bin", "run/b.bin")
        open("run/b.bin").read()  # a read is no change
        os.remove("run/b.bin")
        if os.fork() == 0:
            open("from_child.txt", "w").close()
            os._exit(0)
        os.wait()
    """)
    monkeypatch.chdir(tmp_path)  # the program runs in lintloop's working directory
    run = run_probe(script, [], timeout=20)
    assert run.returncode == 0, run.stderr_tail
    changes = [(c["action"], Path(c["path"]).relative_to(tmp_path).as_posix(), c.get("line")) for c in run.files()]
    assert changes == [("write", "out.txt", 2), ("mkdir", "run", 4), ("write", "run/a.bin", 5),
                       ("rename", "run/a.bin", 6), ("remove", "run/b.bin", 8), ("write", "from_child.txt", 10)]
    result = subprocess.run([*LINTLOOP, "probe", "writer.py"], capture_output=True, text=True, timeout=60)
    assert "files (opened for writing): out.txt, run/a.bin, from_child.txt" in result.stdout
    assert "files (renamed): run/a.bin -> run/b.bin" in result.stdout


def test_the_text_report_names_the_signal_and_the_processes_left_running(tmp_path: Path) -> None:
    # A path longer than a line (as CI's temporary directories are): the script's name is still shown.
    deep = tmp_path / ("a-long-directory-name-" * 4) / ("and-another-one-" * 4)
    deep.mkdir(parents=True)
    script = _write(deep, "crash.py", """
        import os, signal, time
        if os.fork() == 0:
            time.sleep(60)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGSEGV)
    """)
    result = subprocess.run([*LINTLOOP, "probe", str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "killed by SIGSEGV" in result.stdout
    assert "processes: 1 still running at the end of the program, killed" in result.stdout
    assert re.search(rf"^\s+pid \d+: \S*python\S* '?\S*{re.escape(script.name)}'?$", result.stdout, re.M), result.stdout


# Each way a file could get its neighbours run by a tool that imports or executes it.
_MARKER_CODE = "open(__import__('os').path.join({marker!r}, {name!r}), 'w').close()\n"


def test_check_and_fix_never_import_or_run_the_code_they_lint(tmp_path: Path) -> None:
    tree, markers = tmp_path / "project", tmp_path / "markers"
    markers.mkdir()

    def marking(name: str) -> str:
        return _MARKER_CODE.format(marker=str(markers), name=name)

    train = (FIXTURES / "LL301_bad.py").read_text(encoding="utf-8")
    _write(tree, "train.py", marking("train") + "import helpers\nfrom pkg import sub\n" + train)
    for name in ("helpers.py", "pkg/__init__.py", "pkg/sub.py", "conftest.py", "sitecustomize.py",
                 "usercustomize.py", "setup.py", "__main__.py", "lintloop_plugin.py"):
        _write(tree, name, marking(name))
    _write(tree, "evil.pth", "import os; " + marking("evil.pth"))
    before = (tree / "train.py").read_bytes()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    runs = [[*LINTLOOP, "check", ".", "--select", "ALL"],
            [*LINTLOOP, "fix", ".", "--unsafe-fixes", "--select", "ALL"]]
    if shutil.which("lintloop", path=str(Path(sys.executable).parent)):  # the console script, as users run it
        runs.append([str(Path(sys.executable).parent / "lintloop"), "check", "."])
    for command in runs:
        result = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode in (0, 1), (command, result.stderr)
    assert (tree / "train.py").read_bytes() != before  # fix did its work on the file
    assert sorted(p.name for p in markers.iterdir()) == []


@pytest.mark.framework
@needs_proc
def test_check_probe_stops_a_hanging_program_and_leaves_nothing_running(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pids = tmp_path / "pids"
    pids.mkdir()
    train = (FIXTURES / "LL301_bad.py").read_text(encoding="utf-8")
    hang = textwrap.dedent(f"""
        import os, time
        if os.fork() == 0:  # a daemon that left the group, started before the training
            os.setsid()
            open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
            while True:
                time.sleep(1)
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        main(["--steps", "3"])
        while True:  # then hangs
            time.sleep(1)
    """)
    script = _write(tmp_path, "train.py", train.replace('if __name__ == "__main__":\n    main()',
                                                        'if __name__ == "__main__":\n' + textwrap.indent(hang, "    ")))
    result = subprocess.run([*LINTLOOP, "check", str(script), "--select", "LL301", "--probe", "--probe-timeout",
                             "8", "--format", "json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    findings = json.loads(result.stdout)
    findings = findings["findings"] if isinstance(findings, dict) else findings
    assert [f["code"] for f in findings] == ["LL301"]
    # The three training steps before the hang are in the verdict: events are written as they happen.
    assert findings[0]["probe"] == {"status": "error", "evidence": {"reason": "timed out", "steps": 3}}
    recorded = _recorded_pids(pids)
    assert len(recorded) >= 2
    _assert_none_running(recorded)

