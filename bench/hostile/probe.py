"""The runtime probe: programs that hide processes from the end of the run, or change files in ways a report
gets wrong (issue 36, item 11).

Processes: each program starts processes of one kind (a plain fork, a daemon that forks twice and leaves
the session, one that also drops its environment, one that ignores SIGTERM, one in a process group of its
own, a chain that forks and exits forever, a swarm, a shell's background job, one that execs itself again
and again), then does one thing to the run (exits, hangs until the timeout, kills or signals its parent,
signals every ancestor it can see, signals every process its user may: the last only where it runs in a
PID namespace of its own, never outside one).  No process may outlive the run (the harness looks for the
case's mark, which every process inherits or is given in its arguments), and the report must agree with
what the probe says held the program (in a namespace, no signal from the program reaches the run).

Files: each program makes one kind of change (delete a file, a tree, a file that never existed; create;
rename files, folders, onto a file; a file made a folder and back; links made, retargeted, written
through; changes made by a shell; thousands of files; a tree 60 deep; a file made and removed), on a
name of one family (plain, with a space, a terminal escape, a newline, a bidirectional override, bytes
that are no UTF-8, 200 characters).  The JSON report must list exactly what the harness's own snapshot of
the sandbox saw change, no more; the text report must print every name escaped, as it must what the
program prints, raises and warns, and the name of a program that is not there.  The probe's temporary
folder (in the sandbox: TMPDIR) must be gone after the run.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable

from harness import Case, Link, Outcome

CATEGORY = "probe"
DESCRIPTION = "programs that hide processes from the probe or change files in ways its report gets wrong"

_TMP = {"home/tmp": None}  # the probe's temporary folder goes here (TMPDIR), and must be gone after the run
_ENV = {"TMPDIR": "{sandbox}/home/tmp"}
try:
    _HOST_PID_NAMESPACE = os.readlink("/proc/self/ns/pid")  # (a program outside a namespace of its own has it)
except OSError:
    _HOST_PID_NAMESPACE = ""

_PRELUDE = """
import os, signal, subprocess, sys, time

MARK = os.environ["HOSTILE_CASE_MARK"]
LOOP = "import time\\nwhile True: time.sleep(1)"


def own_namespace():
    try:
        return os.readlink("/proc/self/ns/pid") != {host!r}
    except OSError:
        return False


def forever():
    while True:
        time.sleep(1)


def child(work):
    if os.fork() == 0:
        work()
        os._exit(0)
"""

# What the program starts: the body of `spawn()`.
_SPAWNS = {
    "fork": "child(forever)",
    "daemon": """
        def daemon():
            os.setsid()
            child(forever)
        child(daemon)""",
    "daemon-without-environment": """
        def daemon():
            os.setsid()
            if os.fork() == 0:
                os.execve(sys.executable, [sys.executable, "-c", LOOP, MARK], {})
        child(daemon)""",
    "sigterm-proof": """
        def stubborn():
            for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1):
                signal.signal(number, signal.SIG_IGN)
            forever()
        child(stubborn)""",
    "own-group": """
        def grouped():
            os.setpgid(0, 0)
            forever()
        child(grouped)""",
    "fork-chain": """
        def chain():
            while True:
                if os.fork() != 0:
                    os._exit(0)
        child(chain)""",
    "swarm": """
        def swarm(depth=0):
            os.setpgid(0, 0)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            for _ in range(2 if depth < 3 else 0):
                child(lambda: swarm(depth + 1))
            forever()
        child(swarm)""",
    "shell-background": """subprocess.run(["sh", "-c", "sleep 1000 & exit 0"], check=True)""",
    "re-exec": """
        code = ("import os, sys, time\\ntime.sleep(0.05)\\n"
                "os.execv(sys.executable, [sys.executable, '-c', sys.argv[1], sys.argv[1], sys.argv[2]])")
        subprocess.Popen([sys.executable, "-c", code, code, MARK], env={}, start_new_session=True)""",
}

# What the main process then does: the body of `act()`.
_ACTS = {
    "exit": "pass",
    "hang": "forever()",
    "kill-parent": "os.kill(os.getppid(), signal.SIGKILL)",
    "signal-parent": """
        for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGQUIT):
            os.kill(os.getppid(), number)""",
    "kill-ancestors": """
        # Outside a namespace: the parent only (its grandparent is lintloop's end of the run: no guard above).
        pid = os.getppid()
        while pid > 1:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                above = int(fh.read().rsplit(b")", 1)[1].split()[1])
            os.kill(pid, signal.SIGKILL)
            pid = above if own_namespace() else 0
        if own_namespace():
            os.kill(1, signal.SIGKILL)""",
    "kill-everything": """
        if own_namespace():  # (outside one this would end every process of the user)
            os.kill(-1, signal.SIGKILL)
            spawn()  # (what it had started is gone: one more, for the end of the run)""",
}

_PROCESS_PROGRAM = _PRELUDE + """

def spawn():
{spawn}


def act():
{act}


spawn()
time.sleep(0.3)
print("acting", flush=True)
act()
time.sleep(0.3)
print("outlived", flush=True)
"""

_QUICK_PROCESSES = [("daemon-without-environment", "kill-parent"), ("shell-background", "kill-everything")]


def _process_program(spawn: str, act: str) -> str:
    def body(code: str) -> str:
        return textwrap.indent(textwrap.dedent(code).strip(), "    ")

    return _PROCESS_PROGRAM.replace("{spawn}", body(_SPAWNS[spawn])).replace("{act}", body(_ACTS[act])).replace(
        "{host!r}", repr(_HOST_PID_NAMESPACE))


_REPORT_KEYS = ("left_running", "timed_out", "returncode", "containment", "lost_supervisor", "duration_s", "files",
                "files_compared")


def _report(outcome: Outcome) -> dict:
    """The JSON report on stdout (ValueError where it is not one: the caller says so)."""
    report = json.loads(outcome.out)
    missing = [key for key in _REPORT_KEYS if not isinstance(report, dict) or key not in report]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    return report


def _checked(expect: Callable[[dict, Outcome], str | None]) -> Callable[[Outcome], str | None]:
    """`expect` of the JSON report, or what is wrong with the report itself."""
    def check(outcome: Outcome) -> str | None:
        try:
            report = _report(outcome)
        except (ValueError, KeyError, TypeError) as exc:
            return f"no JSON report as the probe writes it: {type(exc).__name__}: {exc}"
        try:
            return expect(report, outcome)
        except (KeyError, TypeError, ValueError) as exc:
            return f"a report unlike the probe's: {type(exc).__name__}: {exc}"
    return check


def _process_expectation(act: str) -> Callable[[Outcome], str | None]:
    def expect(report: dict, outcome: Outcome) -> str | None:
        if report["left_running"] < 1:
            return f"no process named as left running: {report['left_running']}"
        if act == "hang":
            return None if report["timed_out"] else "a program that hangs did not time out"
        if report["containment"] == "pid namespace":  # nothing the program signals reaches the run
            if (report["returncode"], report["lost_supervisor"]) != (0, None):
                return f"in a namespace, {act} changed the run: {report['returncode']}, {report['lost_supervisor']}"
        elif act in ("kill-parent", "kill-ancestors") and report["lost_supervisor"] is None:
            return "a supervisor killed by the program is not reported"
        return None if report["duration_s"] < 10 else f"the run took {report['duration_s']} s"
    return _checked(expect)


def _process_cases(quick: bool) -> list[Case]:
    pairs = _QUICK_PROCESSES if quick else [(spawn, act) for spawn in _SPAWNS for act in _ACTS]
    return [Case(CATEGORY, f"{spawn}-{act}", {"project/program.py": _process_program(spawn, act), **_TMP},
                 ["probe", "program.py", "--format", "json", "--timeout", "3"], exits=frozenset({0, 1, 2}),
                 writes=("project/*",), expect=_process_expectation(act), env=_ENV, timeout=60)
            for spawn, act in pairs]


# Name families for the files a program changes (bytes: some are no UTF-8).
_NAMES = {
    "plain": b"data",
    "space": b"my data",
    "escape": b"\x1b]0;owned\x07\x1b[2Jred",
    "newline": b"two\nlines",
    "bidi": "\u202eevil".encode(),
    "undecodable": b"latin\xff\xfe",
    "long": b"n" * 200,
}

# Each change: (what stands before, in the project: name -> content, with N for the name; the program's code).
_CHANGES: dict[str, tuple[dict[bytes, object], str]] = {
    "delete-file": ({b"N": "x"}, "os.remove(N)"),
    "delete-tree": ({b"N/a": "a", b"N/sub/b": "b", b"N/sub/c": "c"}, "shutil.rmtree(N)"),
    "delete-missing": ({}, """
        for call in (os.remove, os.rmdir, shutil.rmtree, lambda path: open(path + b"/x", "w")):
            try:
                call(N)
            except OSError:
                pass
        pathlib.Path(os.fsdecode(N)).unlink(missing_ok=True)"""),
    "create-file": ({}, "open(N, 'w').write('x')"),
    "create-tree": ({}, """
        os.makedirs(N + b"/a/b")
        open(N + b"/a/b/f", "w").write("f")"""),
    "rename-file": ({b"N": "x"}, "os.rename(N, N + b'.moved')"),
    "rename-folder": ({b"N/x": "x", b"N/y/z": "z"}, "os.rename(N, N + b'.moved')"),
    "rename-onto-file": ({b"N": "new", b"N.old": "old"}, "os.replace(N, N + b'.old')"),
    "file-to-folder": ({b"N": "x"}, """
        os.remove(N)
        os.mkdir(N)"""),
    "folder-to-file": ({b"N/x": "x"}, """
        shutil.rmtree(N)
        open(N, "w").write("now a file")"""),
    "new-link": ({}, "os.symlink(b'nowhere', N)"),
    "retarget-link": ({b"N": Link("first"), b"first": "1", b"second": "2"}, """
        os.remove(N)
        os.symlink(b"second", N)"""),
    "write-through-link": ({b"N": Link("../outside/victim")}, "open(N, 'a').write('appended')"),
    "shell-delete": ({b"N": "x"}, "subprocess.run([b'rm', b'-f', N], check=True)"),
    "shell-create": ({}, "subprocess.run([b'touch', N], check=True)"),
    "chmod": ({b"N": "x"}, "os.chmod(N, 0o600)"),
    "hard-link": ({b"N": "x"}, "os.link(N, N + b'.hard')"),
    "thousands-in-a-folder": ({}, """
        os.mkdir(N)
        for number in range(3000):
            open(N + b"/%d" % number, "w").close()"""),
    "thousands-at-the-top": ({}, """
        for number in range(1500):
            open(N + b"-%d" % number, "w").close()"""),
    "deep": ({}, """
        path = N
        for _ in range(60):
            path += b"/" + N[:8]
        os.makedirs(path)"""),
    "made-and-removed": ({}, """
        open(N, "w").write("scratch")
        os.remove(N)"""),
}
_QUICK_FILES = {("delete-tree", "plain", "json"), ("shell-delete", "escape", "text")}

_FILE_PROGRAM = """
import os, pathlib, shutil, subprocess
N = {name!r}
{code}
"""


def _file_setup(before: dict[bytes, object], name: bytes) -> dict[str, object]:
    files: dict[str, object] = {"outside/victim": "victim\n", **_TMP}
    for path, content in before.items():
        target = path.replace(b"N", name)
        if isinstance(content, Link):
            content = Link(content.target.replace("N", os.fsdecode(name)))
        files["project/" + os.fsdecode(target)] = content
    return files


def _file_cases(quick: bool) -> list[Case]:
    found = []
    for change, family in [(change, name) for change in _CHANGES for name in _NAMES]:
        before, code = _CHANGES[change]
        program = _FILE_PROGRAM.replace("{name!r}", repr(_NAMES[family])).replace(
            "{code}", textwrap.dedent(code).strip())
        files = {**_file_setup(before, _NAMES[family]), "project/program.py": program}
        for output in ("json", "text"):
            if quick and (change, family, output) not in _QUICK_FILES:
                continue
            argv = ["probe", "program.py", *(["--format", "json"] if output == "json" else [])]
            found.append(Case(CATEGORY, f"{change}-{family}-{output}", files, argv, exits=frozenset({0}),
                              writes=("project/*", "outside/victim"), env=_ENV, timeout=60,
                              expect=_checked(_agrees_with_the_sandbox) if output == "json" else None))
    return found


def _agrees_with_the_sandbox(report: dict, outcome: Outcome) -> str | None:
    """The JSON report's changes are what the harness saw change in the project and outside it: each named
    path changed as said, each change of the sandbox is named or counted in its folder's change."""
    seen = {path: how for path, how in outcome.changed.items() if path.startswith(("project/", "outside/"))}
    root = os.path.realpath(outcome.sandbox)
    explained: set[str] = set()
    expected = {"created": ("created",), "deleted": ("removed",), "modified": ("changed",), "replaced": ("changed",)}
    for change in report["files"]:
        path = os.path.relpath(change["path"], root)
        if change["change"] == "renamed":
            to = os.path.relpath(change["to"], root)
            if seen.get(path) != "removed" or seen.get(to) not in ("created", "changed"):
                return f"renamed {path!r} -> {to!r}: the sandbox saw {seen.get(path)!r}, {seen.get(to)!r}"
            explained |= {path, to, *_under(seen, path, "removed"), *_under(seen, to, "created")}
            counted = len(_under(seen, path, "removed"))
        elif change["change"] == "modified" and change["kind"] == "directory":
            continue  # (a folder's mode: the harness does not compare it)
        else:
            if seen.get(path) not in expected[change["change"]]:
                return f"{change['change']} {path!r}: the sandbox saw {seen.get(path)!r}"
            inside = _under(seen, path, "created" if change["change"] == "created" else "removed")
            explained |= {path, *inside}
            counted = len(inside)
        if change.get("entries", 0) != counted:
            return f"{path!r} counts {change.get('entries', 0)} entries, the sandbox saw {counted} change under it"
    unexplained = sorted(set(seen) - explained)
    listed = report["files_compared"]["total"] == len(report["files"])
    if unexplained and (listed or len(unexplained) != report["files_compared"]["total"] - len(report["files"])):
        return f"changes not in the report: {unexplained[:5]} ({len(unexplained)})"
    return None


def _under(seen: dict[str, str], folder: str, how: str) -> list[str]:
    return [path for path, change in seen.items() if path.startswith(folder + "/") and change == how]


# What the program prints or raises, and the name it is given, printed back by the text report.
_ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e\r"
_OUTPUT = {
    "printed": f"import sys\nprint({_ESCAPES!r})\nprint({_ESCAPES!r}, file=sys.stderr)\nsys.exit(3)\n",
    "raised": f"raise RuntimeError({_ESCAPES!r})\n",
    "warned": f"import warnings\nwarnings.warn({_ESCAPES!r})\n",
}


def _output_cases(quick: bool) -> list[Case]:
    found = [Case(CATEGORY, f"output-{name}", {"project/program.py": program, **_TMP}, ["probe", "program.py"],
                  exits=frozenset({0, 1}), env=_ENV) for name, program in _OUTPUT.items()
             if not quick or name == "raised"]
    found.append(Case(CATEGORY, "output-missing-program", dict(_TMP), ["probe", f"gone{_ESCAPES}.py"],
                      exits=frozenset({2}), env=_ENV))
    return found


def cases(quick: bool) -> list[Case]:
    return _process_cases(quick) + _file_cases(quick) + _output_cases(quick)
