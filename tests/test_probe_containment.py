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
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from lintloop.runtime_probe import runner
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
    """The pids the target's processes wrote into `directory` (one file each, named by its pid, as the
    process sees it: in the probe's PID namespace, its number there)."""
    return [int(p.name) for p in directory.iterdir()]


def _marked(marker: str) -> list[int]:
    """The live processes (numbers in our namespace) whose command line or environment holds `marker`.

    How a test finds the processes of its target from outside: in the probe's PID namespace the numbers
    they record are not ours."""
    needle = marker.encode()
    found = []
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        held = _read_proc(pid, "cmdline") + _read_proc(pid, "environ")
        if pid != os.getpid() and _running(pid) and needle in held:
            found.append(pid)
    return found


def _read_proc(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _assert_none_running(marker: str) -> None:
    """No process holding `marker` is running (each target gets its test's tmp_path in its environment, and
    a process that drops the environment gets it in its arguments)."""
    deadline = time.monotonic() + 2  # reaping by init is asynchronous
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [(pid, _read_proc(pid, "cmdline")) for pid in _marked(marker)] == []


def _marking(tmp_path: Path) -> dict[str, str]:
    """The environment that marks a target's processes as the test's (`_marked`)."""
    return {"CONTAINMENT_TEST": str(tmp_path)}


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc")


@pytest.fixture(scope="module")
def namespaces(tmp_path_factory: pytest.TempPathFactory) -> str:
    """What holds the probe's programs on this machine: "pid namespace", or why not."""
    return run_probe(_write(tmp_path_factory.mktemp("empty"), "empty.py", "pass"), [], timeout=20).containment


@pytest.fixture(params=["namespace", "tree"])
def namespace(request: pytest.FixtureRequest, namespaces: str) -> bool:
    """Each containment: the program in a PID namespace of its own (where Linux makes none: skipped), or in
    the supervisor's process tree only (as where Linux makes none)."""
    if request.param == "namespace" and namespaces != "pid namespace":
        pytest.skip(f"this machine's Linux makes no PID namespace: {namespaces}")
    return request.param == "namespace"


def _zombies_of_ours() -> list[int]:
    """Our children that ended and were never reaped (the orphans a run handed us must not stay)."""
    own = str(os.getpid()).encode()
    found = []
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        stat = _read_proc(pid, "stat")
        fields = stat[stat.rindex(b")") + 2:].split() if stat else []
        if fields and fields[0] == b"Z" and fields[1] == own:
            found.append(pid)
    return found


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
def test_no_process_of_the_program_survives_the_run(tmp_path: Path, ending: str, namespace: bool) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    script = _write(tmp_path, "workers.py", _HANGING_WORKERS)
    run = run_probe(script, [str(pids), ending], timeout=20 if ending == "exit" else 4, namespace=namespace,
                    extra_env=_marking(tmp_path))
    recorded = _recorded_pids(pids)
    assert len(recorded) == 5, run.stderr_tail  # main, fork and spawn workers, plain fork, daemon
    assert run.timed_out is (ending == "timeout")
    assert run.left_running >= 4
    assert run.duration < (10 if ending == "exit" else 12)
    _assert_none_running(str(tmp_path))
    assert _zombies_of_ours() == []


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


def _gone(pid: int) -> bool:
    """Whether the escapee `pid` has ended and been reaped: no zombie, whoever's child (the number may
    since have gone to another program)."""
    if not os.path.exists(f"/proc/{pid}"):
        return True
    return _running(pid) and b"escapee.py" not in _read_proc(pid, "cmdline")  # a zombie's command line is empty


@needs_proc
@pytest.mark.parametrize(("when", "mode", "depth"), [
    ("at_once", "sleep", 1),  # the defect as measured
    ("later", "sleep", 1),  # started while the program runs; the run ends at the timeout
    ("at_once", "reexec", 1),  # a new program in the same process, again and again
    ("later", "sleep", 6),  # escapees that escape in turn, all running
])
def test_a_process_that_left_the_group_and_dropped_the_environment_is_killed_and_named(
        tmp_path: Path, when: str, mode: str, depth: int, namespace: bool) -> None:
    script, pids = _escaping_program(tmp_path)
    run = run_probe(script, [str(pids), when, mode, str(depth)], timeout=20 if when == "at_once" else 3,
                    namespace=namespace)
    assert "escaped" in run.stdout_tail, run.stderr_tail
    assert (run.returncode, run.timed_out) == ((0, False) if when == "at_once" else (-signal.SIGKILL, True))
    escapees = _recorded_pids(pids)
    assert len(escapees) == depth
    _assert_none_running(str(tmp_path))
    if not namespace:  # (in a namespace, the kernel reaps what is left of it when it ends)
        # Gone, not waiting to be reaped by init: the probe's supervisor reaped it before the probe returned.
        assert [pid for pid in escapees if not _gone(pid)] == []
    named = {e["pid"]: e for e in run.of_type("left_running")}
    assert sorted(named) == sorted(escapees) and run.left_running == depth
    assert all(named[pid]["command"][1] == str(tmp_path / "escapee.py") for pid in escapees)
    assert run.duration < (5 if when == "at_once" else 8)  # no wait for pipes an escapee held open


# Issue 36, item 11: a program that kills the process that started it (the supervisor), having started a daemon
# that left the group and dropped the environment (argv: PIDS; the daemon holds PIDS in its arguments).
_KILLS_ITS_PARENT = """
    import os, signal, sys, time

    open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, "-c", "import time\\nwhile 1: time.sleep(1)", sys.argv[1]], {})
        os._exit(0)
    os.wait()
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(0.5)
    print("outlived", os.getppid(), flush=True)
"""


@needs_proc
def test_a_program_that_kills_its_supervisor_leaves_nothing_running(tmp_path: Path, namespace: bool) -> None:
    """In a namespace the program's parent is its init, which no signal from inside ends; outside one, the
    orphans come to lintloop, itself a subreaper for the run, which kills and reaps them."""
    pids = tmp_path / "pids"
    pids.mkdir()
    script = _write(tmp_path, "parricide.py", _KILLS_ITS_PARENT)
    run = run_probe(script, [str(pids)], timeout=20, namespace=namespace)
    _assert_none_running(str(tmp_path))
    assert _zombies_of_ours() == []
    [daemon] = run.of_type("left_running")
    assert daemon["command"][-1] == str(pids)
    if namespace:
        assert (run.returncode, run.stdout_tail, run.containment) == (0, "outlived 1\n", "pid namespace")
    else:  # the run ends with its supervisor; the main process, killed then, has no status to report
        assert (run.returncode, run.containment) == (None, "process tree")
    assert run.duration < 5


def _interpreter_for(user: int, import_root: Path) -> str | None:
    """An interpreter that `user` can run the probe's runner with, which starts it again (ours may lie in a
    folder closed to it)."""
    check = ("import subprocess, sys\nimport lintloop.runtime_probe.runner\n"
             "subprocess.run([sys.executable, '-V'], check=True)")
    for python in (sys.executable, "/usr/bin/python3"):
        probe = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", python, "-c", check],
                               capture_output=True, timeout=60, cwd="/",
                               env={**os.environ, "PYTHONPATH": str(import_root)})
        if probe.returncode == 0:
            return python
    return None


@needs_proc
@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0 or None in map(shutil.which, ("setpriv", "unshare")),
                    reason="needs root, to make a user's /proc as containers do and to run as that user")
def test_where_linux_makes_no_namespace_the_run_falls_back_to_its_process_tree(checkout_import_root: Path) -> None:
    """As in most containers: part of /proc is mounted over (Docker hides /proc/kcore, /proc/timer_list...),
    so that a user may not mount a /proc of its own in a user namespace.  The supervisor says why, and the
    process tree holds the program: a program that kills its parent still leaves nothing running."""
    nobody = 65534
    python = _interpreter_for(nobody, checkout_import_root)
    if python is None:
        pytest.skip("no interpreter that user 65534 may run with lintloop")
    with tempfile.TemporaryDirectory() as shared:  # (pytest's own folders are closed to other users)
        tmp_path = Path(shared)
        tmp_path.chmod(0o777)
        _fall_back(tmp_path, python, nobody, checkout_import_root)


def _fall_back(tmp_path: Path, python: str, nobody: int, import_root: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    pids.chmod(0o777)
    script = _write(tmp_path, "parricide.py", _KILLS_ITS_PARENT)
    runner = ("import json, pathlib, sys\nfrom lintloop.runtime_probe.runner import run_probe\n"
              "run = run_probe(pathlib.Path(sys.argv[1]), sys.argv[2:], timeout=20)\n"
              "print(json.dumps([run.containment, run.returncode, run.lost_supervisor, run.left_running]))")
    masked = (f"mount --bind /dev/null /proc/uptime && exec setpriv --reuid={nobody} --regid={nobody} --clear-groups "
              f"{shlex.quote(python)} -c {shlex.quote(runner)} {shlex.quote(str(script))} {shlex.quote(str(pids))}")
    result = subprocess.run(["unshare", "--mount", "sh", "-c", masked], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(import_root)}, cwd=tmp_path)
    containment, returncode, lost, left = json.loads(result.stdout)
    assert containment.startswith("process tree (no PID namespace: [Errno 1] mount:"), result.stderr
    assert (returncode, lost, left) == (None, "the probe's supervisor was killed by SIGKILL", 1)
    _assert_none_running(str(tmp_path))


# Issue 36, item 11: a program in a PID namespace that signals everything it can: every process of its user
# (kill -1), its namespace's init by number, with each signal that ends a process by default.  Outside a
# namespace (argv[2], the test's own PID namespace, is this one) it would end the machine's processes: it stops.
_SIGNALS_EVERYTHING = """
    import os, signal, subprocess, sys, time

    if os.readlink("/proc/self/ns/pid") == sys.argv[2]:
        sys.exit("not in a namespace of its own")
    daemon = [sys.executable, "-c", "import time\\nwhile True: time.sleep(1)", sys.argv[1]]
    subprocess.Popen(daemon, start_new_session=True)
    time.sleep(0.2)
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL):
        os.kill(1, number)
    os.kill(-1, signal.SIGKILL)  # all but us and the init
    time.sleep(0.2)
    subprocess.Popen(daemon, start_new_session=True)  # one more, for the end of the run
    print("outlived", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), flush=True)
"""


@needs_proc
def test_in_a_namespace_nothing_the_program_signals_is_outside_it(tmp_path: Path, namespaces: str) -> None:
    if namespaces != "pid namespace":
        pytest.skip(f"this machine's Linux makes no PID namespace: {namespaces}")
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a process of the same user, outside
    try:
        script = _write(tmp_path, "signals.py", _SIGNALS_EVERYTHING)
        run = run_probe(script, [str(tmp_path), os.readlink("/proc/self/ns/pid")], timeout=20)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
    assert (run.returncode, run.containment) == (0, "pid namespace"), run.stderr_tail
    # All it could see: its init, itself, the last daemon, and the first one if its parent has not reaped it.
    seen = json.loads(run.stdout_tail.removeprefix("outlived "))
    assert seen[:2] == [1, 2] and len(seen) <= 4, seen
    [daemon] = run.of_type("left_running")
    assert daemon["command"][-1] == str(tmp_path)
    _assert_none_running(str(tmp_path))


# Issue 36, item 11: programs that make their processes hard to catch (argv: MARK, KIND): "chain" forks a
# child and exits, in each child again, forever (one process at a time, a new number each instant); "swarm"
# starts, in each process, two children that ignore SIGTERM and lead process groups of their own, four
# levels deep (31 processes), then each sleeps.
_UNRULY = """
    import os, signal, sys, time

    MARK, KIND = sys.argv[1:]
    if KIND == "chain":
        open(os.path.join(MARK, "started"), "w").close()
        while True:
            if os.fork() != 0:
                os._exit(0)
    def swarm(depth):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if depth:  # (the main process leads the session: it cannot)
            os.setpgid(0, 0)
        for _ in range(2 if depth < 4 else 0):
            if os.fork() == 0:
                swarm(depth + 1)
        open(os.path.join(MARK, str(os.getpid())), "w").close()
        while True:
            time.sleep(1)
    swarm(0)
"""


@needs_proc
@pytest.mark.parametrize("kind", ["chain", "swarm"])
def test_processes_that_run_from_the_end_of_the_run_are_caught(tmp_path: Path, kind: str, namespace: bool) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    script = _write(tmp_path, "unruly.py", _UNRULY)
    run = run_probe(script, [str(marks), kind], timeout=2, namespace=namespace)
    assert run.timed_out or kind == "chain", run.stderr_tail
    assert len(os.listdir(marks)) == (1 if kind == "chain" else 31)
    _assert_none_running(str(tmp_path))
    assert _zombies_of_ours() == []
    assert run.duration < 8


@needs_proc
def test_the_json_report_names_the_escaped_process(tmp_path: Path) -> None:
    script, pids = _escaping_program(tmp_path)
    result = subprocess.run([*LINTLOOP, "probe", str(script), "--format", "json", "--", str(pids), "at_once",
                             "sleep", "1"], capture_output=True, text=True, timeout=60)
    [escapee] = _recorded_pids(pids)
    _assert_none_running(str(tmp_path))
    data = json.loads(result.stdout)
    assert data["returncode"] == 0 and data["left_running"] == 1, result.stderr
    [named] = [e for e in data["events"] if e["type"] == "left_running"]
    assert named["pid"] == escapee and named["command"][1:] == [str(tmp_path / "escapee.py"), str(pids), "sleep", "1"]


@needs_proc
def test_the_memory_limit_counts_an_escaped_process(tmp_path: Path, namespace: bool) -> None:
    script, pids = _escaping_program(tmp_path)
    run = run_probe(script, [str(pids), "later", "allocate", "1"], timeout=30, memory_limit_mb=160,
                    namespace=namespace)
    assert run.killed_for_memory and not run.timed_out, run.stderr_tail
    assert run.peak_memory_mb is not None and run.peak_memory_mb > 160
    [escapee] = _recorded_pids(pids)
    _assert_none_running(str(tmp_path))
    assert [e["pid"] for e in run.of_type("left_running")] == [escapee]
    assert run.duration < 15


@needs_proc
def test_a_run_whose_lintloop_is_killed_leaves_nothing_running(tmp_path: Path, namespace: bool) -> None:
    """The supervisor ends the run when lintloop's end of their socket closes, however lintloop ended."""
    script, pids = _escaping_program(tmp_path)
    probe = subprocess.Popen([sys.executable, "-c", "import sys, pathlib\n"
                              "from lintloop.runtime_probe.runner import run_probe\n"
                              "run_probe(pathlib.Path(sys.argv[1]), sys.argv[3:], timeout=60,\n"
                              "          namespace=sys.argv[2] == 'yes')",
                              str(script), "yes" if namespace else "no", str(pids), "later", "sleep", "1"])
    try:
        deadline = time.monotonic() + 30
        while not _recorded_pids(pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        run = [pid for pid in _marked(str(tmp_path)) if pid != probe.pid]
    finally:
        probe.kill()
        probe.wait()
    # The supervisor (in a namespace: its three processes), the main process, the escapee.
    assert len(run) >= 3
    _assert_none_running(str(tmp_path))


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
    # What stands after the run: run/a.bin, renamed to run/b.bin and then removed, is no change.
    changes = [(c["change"], Path(c["path"]).relative_to(tmp_path).as_posix(), c["kind"], c.get("line"))
               for c in run.files()]
    assert changes == [("created", "from_child.txt", "file", 10), ("created", "out.txt", "file", 2),
                       ("created", "run", "directory", 4)]
    child = run.files()[0]["pid"]
    assert child != run.events[0]["pid"] and [e["pid"] for e in run.of_type("start") if e.get("forked")] == [child]
    time.sleep(0.01)  # (a later time for what the second run writes again)
    result = subprocess.run([*LINTLOOP, "probe", "writer.py"], capture_output=True, text=True, timeout=60)
    assert "files (modified): from_child.txt, out.txt" in result.stdout, result.stdout
    assert "files (created)" not in result.stdout and "renamed" not in result.stdout


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
    assert len(_recorded_pids(pids)) >= 2
    _assert_none_running(str(tmp_path))



def test_events_a_program_writes_itself_are_read_within_bounds(tmp_path, monkeypatch):
    """The program can write anything into the file its events go to: JSON nested too deep for the
    standard decoder, values that are no events, a line without end, more lines than a run writes.
    The run's report reads what is within bounds and says how much it left unread."""
    script = _write(tmp_path, "forge.py", """
        import json, os
        events = json.loads(os.environ["LINTLOOP_PROBE_CONFIG"])["events"]
        with open(events, "ab") as out:
            out.write(b"[" * 100_000 + b"]" * 100_000 + b"\\n")  # deeper than any decoder's stack
            out.write(b"[1, 2, 3]\\n\\"text\\"\\n")  # JSON, but no event
            out.write(b"{}\\n" * 5_000)  # more than a run writes (the bound is lowered below)
            out.write(b"{" + b"x" * (3 << 20))  # a line without end, larger than a line may be
    """)
    monkeypatch.setattr(runner, "MAX_EVENTS", 1_000)
    run = run_probe(script, [], timeout=60)
    assert run.returncode == 0, run.stderr_tail
    assert all(isinstance(event, dict) for event in run.events)
    [truncated] = [event for event in run.events if event.get("type") == "events_truncated"]
    assert truncated["unread_lines"] >= 4_000
