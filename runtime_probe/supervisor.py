"""The probe's supervisor: the process between lintloop and the program it probes.

Where Linux allows it, the program runs in a PID namespace of its own, whose first process (its
"init", number 1 inside) is the supervisor: a process of the program can then neither see nor
signal anything outside the namespace -- not lintloop, not the supervisor (the kernel drops, from
inside, every signal to a namespace's init for which it has no handler: SIGKILL included), not the
user's other processes (``kill(-1, ...)`` reaches the namespace only) -- and when the supervisor ends,
whatever ended it, the kernel kills every process left in the namespace: nothing the program starts
can outlive the run.  The program gets a mount namespace too, with its own ``/proc`` (so that the
numbers ``os.getpid()`` gives name its processes there), mounts received from the system but none
sent back.  Root (``CAP_SYS_ADMIN``) makes the namespaces directly; another user through a user
namespace that maps its own user and group to themselves (Linux's unprivileged user namespaces:
allowed by default on Debian, Fedora, Arch; not in most containers, nor on Ubuntu 24.04 and later,
whose AppArmor denies them to unconfined programs).  Inside one the program's supplementary groups
show as "nogroup" (the kernel still grants them), and set-user-ID programs gain nothing.

Where Linux does not allow it (or the runner asks for no namespace), the supervisor is two processes,
each a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): a guard, and below it the supervisor proper,
which starts the program in a session of its own and reaps every process that ends below it.  A
subreaper is given the orphans of its descendants instead of init: whatever a process of the program
does -- fork twice, ``setsid``, ``execve`` with an empty environment -- it stays in the supervisor's
tree, where the runner counts its memory and where the supervisor kills it at the end.  A program that
kills the supervisor hands its processes on to the guard, which ends the run in its place.  One that
kills both (or every process its user may signal, lintloop included) can leave a process that also left
its group and dropped the run's token: only a namespace rules that out.
Not a cgroup: making one needs a writable, delegated cgroup, which a login session (a scope that root
owns) and most containers do not give, and a process in one could still signal lintloop and the supervisor.

The runner starts it as ``python -I -S supervisor.py FD MODE COMMAND...`` (the standard library only:
the probe's bootstrap on ``PYTHONPATH`` is not loaded, and it starts in milliseconds), with the
program's environment, working directory and standard streams; MODE is ``namespace`` (where Linux
allows it) or ``tree`` (the subreapers only).  FD is a stream socket to the runner, on which the
supervisor writes one JSON object a line:

- ``{"started": PID, "supervisor": NUMBER}``: the main process, and the supervisor's process that holds
  it (its parent); with ``"namespace": true`` where the program runs in a namespace -- then NUMBER is
  the system's number of its init, and every PID the supervisor says is the number inside, as the
  program sees it -- or ``"no_namespace": WHY`` where one was asked for and Linux made none.  Or
  ``{"error": MESSAGE}`` where the program could not be started (then it exits);
- ``{"returncode": N}`` when the program's main process ends (negative: the signal that killed it);
- ``{"lost": WHY}`` from the guard, where the program killed the supervisor: the run ends there;
- ``{"left_running": [{"pid", "t", "command"}, ...]}`` at the end of the run, the last line.

The run ends when the runner shuts its side of the socket down, or closes it by dying: the supervisor
then kills (SIGKILL) its children until it has none left -- a killed process's children become its
children -- reaping them as they go, lists those that were running besides the main process, and
exits; in a namespace it kills every process of it at once (``kill(-1)`` from its init, which no fork
can outrun).  It signals only its own children, not yet reaped (or, in a namespace, its members):
their numbers cannot have been given to another process.  Without a subreaper (macOS) its only child
is the main process; the runner's scan of the run's process group and environment token finds the rest.

The runner also uses this module's process-table helpers (``process_stat``, ``describe_process``).
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import time

END_S = 5.0  # the most the end of a run waits for killed processes to go (one in uninterruptible sleep may not)
MODES = ("namespace", "tree")  # the program in a PID namespace where Linux allows it / in the subreaper's tree only
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36  # <linux/prctl.h>
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000  # <linux/sched.h>
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_SLAVE = 0x2, 0x4, 0x8, 0x4000, 0x80000  # <linux/mount.h>
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_CMDLINE_TRIES = 10  # of 5 ms: a process in execve reads an empty cmdline for a moment


def process_stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name: [state, ppid, pgrp, ...], field 19 the start
    (clock ticks since boot); None where it is gone or there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        return fields if len(fields) > 19 else None
    except (OSError, ValueError):
        return None


def describe_process(pid: int) -> dict | None:
    """``{"pid", "t" (seconds since it started), "command" (its argv; None where unreadable)}`` of a live
    process; None for a zombie or a process that is gone."""
    stat = process_stat(pid)
    if stat is None or stat[0] in (b"Z", b"X"):
        return None
    try:
        argv = _cmdline(pid)
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return {"pid": pid, "t": None, "command": None}
    command = [arg.decode("utf-8", "replace") for arg in argv.rstrip(b"\0").split(b"\0")] if argv else None
    return {"pid": pid, "t": round(uptime - int(stat[19]) / _CLOCK_TICKS, 2), "command": command}


def _cmdline(pid: int) -> bytes:
    """A live process's /proc cmdline. It reads empty while the process is in execve (the old program's
    memory is gone, the new one's not yet mapped): read again for up to ~50 ms."""
    for _ in range(_CMDLINE_TRIES):
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read()
        if argv:
            return argv
        time.sleep(0.005)
    return argv


def _become_subreaper() -> None:
    """Make this process a child subreaper, where the system can (Linux 3.4 and later); where it cannot, the
    runner's scan of the run's group and token is the fallback."""
    if sys.platform.startswith("linux"):
        _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args: object) -> None:
    """Call libc's `name`; raise OSError where it fails."""
    if getattr(_libc(), name)(*args) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{name}: {os.strerror(number)}")


def _enter_namespace(control: socket.socket) -> tuple[int | None, str]:
    """Start the program's PID namespace, of which the calling process's child's child is the init.

    Returns in that init (number 1 inside), with its number outside; returns (None, why) in the calling
    process where Linux would make no such namespace (nothing has changed: the run goes on without one).
    Where it did, the calling process only waits for the namespace to end, then exits: it never returns.
    Between the two, a middle process makes the namespaces (the calling process keeps its own, and a
    namespace that fails halfway dies with it); the middle process and the init each die with their parent
    (``PR_SET_PDEATHSIG``), so that the runner ending the supervisor it started ends the namespace too."""
    if not sys.platform.startswith("linux"):
        return None, f"no PID namespaces on {sys.platform}"
    reader, writer = os.pipe()
    parent = os.getpid()
    middle = os.fork()
    if middle == 0:  # in the middle process, then in the init
        os.close(reader)
        try:
            return _make_namespace(control, parent, writer), ""
        except BaseException as exc:  # the namespace is not to be: say why, and go
            os.write(writer, str(exc).encode("utf-8", "replace")[:4000])
            os._exit(1)
    os.close(writer)
    with os.fdopen(reader, "rb") as said:
        verdict = said.read()
    if verdict == b"ok":
        control.close()  # the init speaks to the runner now
        os.waitpid(middle, 0)
        os._exit(0)
    os.waitpid(middle, 0)
    return None, verdict.decode("utf-8", "replace") or "the process making it ended"


def _make_namespace(control: socket.socket, parent: int, writer: int) -> int:
    """In the middle process: make the namespaces, then the init, and wait for it; returns in the init."""
    _call("prctl", _PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the supervisor is gone already
        os._exit(1)
    uid, gid = os.getuid(), os.getgid()
    try:  # root (CAP_SYS_ADMIN) needs no user namespace
        _call("unshare", _CLONE_NEWPID | _CLONE_NEWNS)
    except OSError:
        _call("unshare", _CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS)
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
    _call("mount", None, b"/", None, _MS_REC | _MS_SLAVE, None)  # the system's mounts come in, ours stay here
    middle = os.getpid()
    init = os.fork()
    if init != 0:
        control.close()
        os.close(writer)
        _, status = os.waitpid(init, 0)
        os._exit(0 if os.waitstatus_to_exitcode(status) == 0 else 1)
    _call("prctl", _PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    outside = int(os.readlink("/proc/self"))  # the system's /proc still: the number outside
    stat = process_stat(outside)
    if stat is None or int(stat[1]) != middle:  # the middle process is gone already
        os._exit(1)
    _call("mount", b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    os.write(writer, b"ok")
    os.close(writer)
    return outside


def _members() -> list[int]:
    """The processes of our namespace but us (its init), live or not yet reaped."""
    return [int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit() and entry.name != "1"]


def _children(main_pid: int | None, main_reaped: bool) -> list[int]:
    """Our children, live or not yet reaped (from /proc: the kernel's own list, /proc/PID/task/TID/children,
    is not built into every kernel).  Without /proc only the main process is known to be ours."""
    if not os.path.isdir("/proc"):
        return [] if main_reaped or main_pid is None else [main_pid]
    own = str(os.getpid()).encode()
    children = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = process_stat(int(entry.name))
            if stat is not None and stat[1] == own:
                children.append(int(entry.name))
    return children


class _Supervisor:
    """The supervisor of a started program: its main process, the socket to the runner."""

    def __init__(self, control: socket.socket, main_pid: int | None, wakeup: int, in_namespace: bool) -> None:
        self.control = control
        self.main_pid = main_pid
        self.main_reaped = False
        self.wakeup = wakeup  # readable after a SIGCHLD
        self.in_namespace = in_namespace  # we are the init of the program's PID namespace

    def send(self, message: dict, after_newline: bool = False) -> None:
        try:
            self.control.sendall(b"\n" * after_newline + json.dumps(message).encode() + b"\n")
        except OSError:  # the runner is gone: the run still ends, and nobody reads what it left
            pass

    def reap(self) -> None:
        """Reap every child that has ended; report the main process's end."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.main_pid:
                self.main_reaped = True
                self.send({"returncode": os.waitstatus_to_exitcode(status)})

    def wait(self, timeout: float | None) -> bool:
        """Wait up to `timeout` s for a child to end or the runner to end the run; False once it has."""
        readable, _, _ = select.select([self.control, self.wakeup], [], [], timeout)
        if self.wakeup in readable:
            os.read(self.wakeup, 4096)
        if self.control in readable:
            try:
                return self.control.recv(4096) != b""
            except OSError:
                return False
        return True

    def end(self) -> list[dict]:
        """Kill our children (in a namespace: its members) until none is left, reaping them; return those
        running besides the main process."""
        left: dict[int, dict] = {}
        deadline = time.monotonic() + END_S
        if self.main_pid is not None and not self.main_reaped and not os.path.isdir("/proc"):
            # No subreaper and no list of our children (macOS): the main process's group, as before, while its
            # number, which names the group, is still held by the main process, not yet reaped.
            try:
                os.killpg(self.main_pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            self.reap()
            children = _members() if self.in_namespace else _children(self.main_pid, self.main_reaped)
            if not children or time.monotonic() > deadline:
                return list(left.values())
            for pid in children:
                if pid != self.main_pid and pid not in left:
                    description = describe_process(pid)
                    if description is not None:
                        left[pid] = description
            if self.in_namespace and os.getpid() == 1:
                os.kill(-1, signal.SIGKILL)  # every member but us, in one pass that no fork can outrun
            else:
                for pid in children:
                    os.kill(pid, signal.SIGKILL)  # ours, not reaped: cannot fail, nor reach another process
            select.select([self.wakeup], [], [], 0.05)
            try:
                os.read(self.wakeup, 4096)
            except BlockingIOError:
                pass


def main(argv: list[str]) -> int:
    """Supervise one run (argv: this script, FD, MODE, COMMAND...); the exit status: 1 where the program could
    not start."""
    control = socket.socket(fileno=int(argv[1]))
    control.set_inheritable(False)
    mode, command = argv[2], argv[3:]
    if mode not in MODES:
        raise SystemExit(f"supervisor.py: unknown mode {mode!r}")
    # Python's KeyboardInterrupt is no way for the program to end us: SIGINT ignored, as SIGPIPE and SIGXFSZ are.
    # (In a namespace no other signal from the program reaches its init: SIGCHLD has a handler, and is harmless.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    init, why_not = _enter_namespace(control) if mode == "namespace" else (None, "")
    if init is None:  # a guard above the supervisor, to end the run in its place if the program kills it
        _become_subreaper()
        supervisor = os.fork()
        if supervisor != 0:
            return _guard(control, supervisor)
        _become_subreaper()  # (a child does not inherit it)
    wakeup = _wakeup_pipe()
    try:
        # SIGINT, SIGPIPE and SIGXFSZ, which we ignore, back to their defaults, as subprocess does.
        main_pid = os.posix_spawnp(command[0], command, os.environ, setsid=True,
                                   setsigdef=(signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ))
    except OSError as exc:
        control.sendall(json.dumps({"error": str(exc)}).encode() + b"\n")
        return 1
    supervisor = _Supervisor(control, main_pid, wakeup, init is not None)
    started: dict[str, object] = {"started": main_pid, "supervisor": os.getpid() if init is None else init}
    if init is not None:
        started["namespace"] = True
    elif why_not:
        started["no_namespace"] = why_not
    supervisor.send(started)
    while True:
        supervisor.reap()
        if not supervisor.wait(None):
            break
    supervisor.send({"left_running": supervisor.end()})
    return 0


def _wakeup_pipe() -> int:
    """A pipe that a SIGCHLD makes readable (its reading end)."""
    wakeup, wakeup_write = os.pipe()
    os.set_blocking(wakeup, False)
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, not SIG_IGN: children stay waitable
    return wakeup


def _guard(control: socket.socket, supervisor: int) -> int:
    """Outside a namespace, the supervisor's parent: wait for it; where it did not end by itself (the program
    killed it), end the run in its place.  A subreaper too, it has the supervisor's orphans -- every process of
    the program -- as its children, kills them until none is left, and says so to the runner."""
    _, status = os.waitpid(supervisor, 0)
    guard = _Supervisor(control, None, _wakeup_pipe(), False)
    if not os.WIFSIGNALED(status):
        guard.end()  # (nothing: the supervisor kept its orphans, and ended them)
        return 0
    number = os.WTERMSIG(status)
    name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
    # A line first, to end one the supervisor may have been writing when it was killed.
    guard.send({"lost": f"the probe's supervisor was killed by {name}"}, after_newline=True)
    guard.send({"left_running": guard.end()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
