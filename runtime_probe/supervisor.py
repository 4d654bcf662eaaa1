"""The probe's supervisor: the process between lintloop and the program it probes.

It makes itself a child subreaper (Linux: ``prctl(PR_SET_CHILD_SUBREAPER)``), starts the program in a
session of its own, and reaps every process that ends below it.  A subreaper is given the orphans of
its descendants instead of init: whatever a process of the program does -- fork twice, ``setsid``,
``execve`` with an empty environment -- it stays in the supervisor's tree, where the runner counts its
memory and where the supervisor kills it at the end.  lintloop's own process is left as it is.
Not a cgroup: making one needs a writable, delegated cgroup, which a login session (a scope that
root owns) and most containers do not give; a subreaper needs no privilege (Linux 3.4 and later).

The runner starts it as ``python -I -S supervisor.py FD COMMAND...`` (the standard library only: the
probe's bootstrap on ``PYTHONPATH`` is not loaded, and it starts in milliseconds), with the program's
environment, working directory and standard streams.  FD is a stream socket to the runner, on which
the supervisor writes one JSON object a line:

- ``{"started": PID}``, or ``{"error": MESSAGE}`` where the program could not be
  started (then it exits);
- ``{"returncode": N}`` when the program's main process ends (negative: the signal that killed it);
- ``{"left_running": [{"pid", "t", "command"}, ...]}`` at the end of the run, the last line.

The run ends when the runner shuts its side of the socket down, or closes it by dying: the supervisor
then kills (SIGKILL) its children until it has none left -- a killed process's children become its
children -- reaping them as they go, lists those that were running besides the main process, and
exits.  It signals only its own children, not yet reaped: their numbers cannot have been given to
another process.  Without a subreaper (macOS) its only child is the main process; the runner's scan
of the run's process group and environment token finds the rest.

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
_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read()
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return {"pid": pid, "t": None, "command": None}
    command = [arg.decode("utf-8", "replace") for arg in argv.rstrip(b"\0").split(b"\0")] if argv else None
    return {"pid": pid, "t": round(uptime - int(stat[19]) / _CLOCK_TICKS, 2), "command": command}


def _become_subreaper() -> None:
    """Make this process a child subreaper, where the system can (Linux 3.4 and later); where it cannot,
    the runner's scan of the run's group and token is the fallback."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _children(main_pid: int, main_reaped: bool) -> list[int]:
    """Our children, live or not yet reaped (from /proc: the kernel's own list, /proc/PID/task/TID/children,
    is not built into every kernel).  Without /proc only the main process is known to be ours."""
    if not os.path.isdir("/proc"):
        return [] if main_reaped else [main_pid]
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

    def __init__(self, control: socket.socket, main_pid: int, wakeup: int) -> None:
        self.control = control
        self.main_pid = main_pid
        self.main_reaped = False
        self.wakeup = wakeup  # readable after a SIGCHLD

    def send(self, message: dict) -> None:
        try:
            self.control.sendall(json.dumps(message).encode() + b"\n")
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
        """Kill our children until none is left, reaping them; return those running besides the main process."""
        left: dict[int, dict] = {}
        deadline = time.monotonic() + END_S
        if not self.main_reaped and not os.path.isdir("/proc"):
            # No subreaper and no list of our children (macOS): the main process's group, as before, while its
            # number, which names the group, is still held by the main process, not yet reaped.
            try:
                os.killpg(self.main_pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            self.reap()
            children = _children(self.main_pid, self.main_reaped)
            if not children or time.monotonic() > deadline:
                return list(left.values())
            for pid in children:
                if pid != self.main_pid and pid not in left:
                    description = describe_process(pid)
                    if description is not None:
                        left[pid] = description
                os.kill(pid, signal.SIGKILL)  # ours, not reaped: cannot fail, nor reach another process
            select.select([self.wakeup], [], [], 0.05)
            try:
                os.read(self.wakeup, 4096)
            except BlockingIOError:
                pass


def main(argv: list[str]) -> int:
    """Supervise one run (argv: this script, FD, COMMAND...); the exit status: 1 where the program could not start."""
    control = socket.socket(fileno=int(argv[1]))
    control.set_inheritable(False)
    command = argv[2:]
    wakeup, wakeup_write = os.pipe()
    os.set_blocking(wakeup, False)
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, not SIG_IGN: children stay waitable
    _become_subreaper()
    try:
        # SIGPIPE and SIGXFSZ, which Python ignores, back to their defaults, as subprocess does.
        main_pid = os.posix_spawnp(command[0], command, os.environ, setsid=True,
                                   setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    except OSError as exc:
        control.sendall(json.dumps({"error": str(exc)}).encode() + b"\n")
        return 1
    supervisor = _Supervisor(control, main_pid, wakeup)
    supervisor.send({"started": main_pid})
    while True:
        supervisor.reap()
        if not supervisor.wait(None):
            break
    supervisor.send({"left_running": supervisor.end()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
