"""A warm engine for `lintloop check`: a background process of this user's that holds the CLI and
the engine imported and forks a child to run each `check`, as a build tool's daemon does (sccache's
server, Gradle's daemon, nailgun).

Why: starting Python, importing the CLI (~70 ms) and the engine (libcst's 184 node classes, the
analyses, the rules: ~0.2 s on a 2-core machine) costs more than everything else a small check does.
`lintloop check` (lintloop.entry) hands its arguments, working directory, environment, umask and
standard streams (the file descriptors themselves, over the socket) to the warm engine; the child it
forks, ready in a few milliseconds, runs the command as `lintloop` would (`cli.main`: the same cache,
workers, limits and per-file isolation; output straight to the client's terminal or pipe) and sends
back its exit status. Signals the client gets (Ctrl-C) are passed to the child's process group.
Where no warm engine answers, the check is the client's own and starts one for the next: findings,
output and exit status never depend on which ran it (tests/test_warm_engine.py).

One warm engine per user and environment: lintloop's version and sources, libcst's version, the
interpreter and its module path name it (a source checkout's edit starts a new one). It listens on a
Unix socket in a folder only its user can enter (`$XDG_RUNTIME_DIR/lintloop`, else
`/tmp/lintloop-<uid>`; a folder of another owner, or open to others, is not used), accepts only its
user's connections, and exits after `IDLE_SECONDS` without one (`LINTLOOP_WARM_ENGINE_IDLE`, read as
it starts: another number of seconds); ending it (a signal; its lock file holds its pid) is safe at
any time. Off where `LINTLOOP_WARM_ENGINE=0`, and by default under CI (the `CI` variable set: a
one-shot machine gains nothing from it); `LINTLOOP_WARM_ENGINE=1` turns it on there too. Only where
processes fork (not Windows).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import marshal
import signal
import socket
import stat
import struct
import sys
from typing import Any

SWITCH = "LINTLOOP_WARM_ENGINE"
IDLE_SETTING = "LINTLOOP_WARM_ENGINE_IDLE"  # seconds; read by a warm engine as it starts
IDLE_SECONDS = 600.0
# Bumped when what a client and a warm engine exchange changes (the address names it too).
PROTOCOL = 1
_HEADER = struct.Struct("!Q")


def enabled() -> bool:
    """Whether this run may use (and start) a warm engine."""
    setting = os.environ.get(SWITCH, "")
    if setting in ("0", "1"):
        on = setting == "1"
    else:
        on = not os.environ.get("CI")
    return on and hasattr(os, "fork") and hasattr(socket, "AF_UNIX") and sys.platform != "win32"


def run_check(argv: list[str]) -> int | None:
    """Run `lintloop ARGV` (a `check`) in a child of the warm engine, with this process's standard
    streams, working directory, environment and umask; return its exit status. None where no warm
    engine answered: the caller runs it, and one is started for the next run."""
    address = _address()
    if address is None:
        return None
    try:
        connection = _connect(address)
    except OSError:
        _start(address)
        return None
    with connection:
        umask = os.umask(0o022)
        os.umask(umask)
        streams = [(stream.encoding, stream.errors, stream.line_buffering, stream.write_through)
                   if isinstance(stream, io.TextIOWrapper) else None for stream in (sys.stdin, sys.stdout, sys.stderr)]
        try:
            data = _framed((PROTOCOL, sys.argv[0] if sys.argv else None, argv, os.getcwd(), dict(os.environ), umask,
                            streams))
            sent = socket.send_fds(connection, [data], [0, 1, 2])  # a closed stream: EBADF
            connection.sendall(data[sent:])
            started = _receive(connection)
        except (OSError, EOFError, TypeError, ValueError):
            return None  # nothing ran (a working directory removed, a stream closed): the caller runs it
        group = started[1]
        # Ctrl-C and the like reach this process (the terminal's foreground group): the run gets them.
        forwarded = {number: signal.signal(number, lambda received, frame: _forward(group, received))
                     for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            return int(_receive(connection)[1])
        except (OSError, EOFError, TypeError, ValueError):
            print("lintloop: internal error: the warm engine's run ended without an exit status "
                  f"(set {SWITCH}=0 to run without it)", file=sys.stderr)
            return 2
        finally:
            for number, handler in forwarded.items():
                signal.signal(number, handler)


def _forward(group: int, number: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(group, number)


def _address() -> str | None:
    """This user's and this environment's socket path; None where no safe folder for it exists."""
    folder = _folder()
    if folder is None:
        return None
    from lintloop.engine_identity import engine_identity

    identity = "\0".join([str(PROTOCOL), engine_identity(), sys.executable, sys.prefix, *sys.path])
    address = os.path.join(folder, "engine-" + hashlib.sha256(identity.encode()).hexdigest()[:20] + ".sock")
    return address if len(os.fsencode(address)) < _MAX_ADDRESS_BYTES else None


# The longest socket path every Unix takes (`sun_path`: 108 bytes on Linux, 104 on macOS, with its NUL).
_MAX_ADDRESS_BYTES = 104


def _folder() -> str | None:
    """The folder of this user's warm engines, made if absent: owned by this user, closed to others
    (a folder another user made, or one open to others, is not used: its sockets could be anyone's)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base, name = (runtime, "lintloop") if os.path.isabs(runtime) else (os.environ.get("TMPDIR") or "/tmp",
                                                                     f"lintloop-{os.getuid()}")
    folder = os.path.join(base, name)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        status = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid() or status.st_mode & 0o077:
        return None
    return folder


def end_engines(folder: str) -> None:
    """End the warm engines of `folder` (each `*.sock.lock` holds its engine's pid)."""
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        if name.endswith(".sock.lock"):
            with contextlib.suppress(OSError, ValueError):
                with open(os.path.join(folder, name)) as lock:
                    os.kill(int(lock.read().strip()), signal.SIGTERM)


def _connect(address: str) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(address)
    except OSError:
        connection.close()
        raise
    return connection


def _start(address: str) -> None:
    """Start a warm engine at `address` for the next run, detached from this one (its own session, no
    terminal, `/` as its working directory) with this process's module path, so that it imports the
    engine this process would. One already starting or running keeps the address (a lock decides)."""
    import json
    import subprocess

    code = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
            "from lintloop.warm_engine import serve; serve(sys.argv[2])")
    with contextlib.suppress(OSError):
        subprocess.Popen([sys.executable, "-c", code, json.dumps(sys.path), address], cwd="/",
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)


def _framed(message: Any) -> bytes:
    # marshal: the messages are plain values, both ends the same interpreter (the address says so), and
    # it costs no import (pickle: ~6 ms of a client's start).
    data = marshal.dumps(message)
    return _HEADER.pack(len(data)) + data


def _send(connection: socket.socket, message: Any) -> None:
    connection.sendall(_framed(message))


def _receive(connection: socket.socket) -> Any:
    (length,) = _HEADER.unpack(_read_exactly(connection, _HEADER.size))
    return marshal.loads(_read_exactly(connection, length))


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = connection.recv(min(size, 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


# ----- the warm engine ---------------------------------------------------------------------------


def serve(address: str) -> None:
    """Run the warm engine at `address` until `IDLE_SECONDS` (or `LINTLOOP_WARM_ENGINE_IDLE`) pass
    without a connection. Exits at once where another holds the address."""
    import fcntl

    try:
        idle_seconds = float(os.environ.get(IDLE_SETTING) or IDLE_SECONDS)
    except ValueError:
        idle_seconds = IDLE_SECONDS

    lock = open(address + ".lock", "a")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")  # who holds it: `kill $(cat ENGINE.sock.lock)` ends it
    lock.flush()
    # The point: every child starts with the CLI and the engine loaded, its native parser and the
    # worker pool's modules too (a run imports them where it starts workers: ~20 ms).
    import multiprocessing.connection  # noqa: F401
    import multiprocessing.popen_fork  # noqa: F401
    import multiprocessing.sharedctypes  # noqa: F401

    import libcst

    import lintloop.cli  # noqa: F401
    import lintloop.engine  # noqa: F401

    libcst.parse_module("pass\n")

    with contextlib.suppress(FileNotFoundError):
        os.unlink(address)  # a socket left by a warm engine that died
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(16)
    listener.settimeout(idle_seconds)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the system
    try:
        while True:
            try:
                connection, _ = listener.accept()
            except socket.timeout:
                return
            connection.settimeout(None)
            if not _same_user(connection) or os.fork() != 0:
                connection.close()
                continue
            listener.close()
            _run_child(connection)
    finally:
        # (A child never gets here: it ends in `_run_child`.) The lock is released after, at exit.
        with contextlib.suppress(OSError):
            os.unlink(address)


def _same_user(connection: socket.socket) -> bool:
    """Whether the peer runs as this user (Linux says so; elsewhere the folder's permissions decide)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", credentials)
    return uid == os.getuid()


def _run_child(connection: socket.socket) -> None:
    """In a child forked for one run: take the client's standard streams, working directory,
    environment and umask, run the command as `lintloop` would, send its exit status; when the client
    goes away, end the run and its workers at once. Never returns."""
    status = 2
    try:
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, signal.SIG_DFL)  # the run's worker pool waits for its workers
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as entry.main sets it
        os.setpgid(0, 0)  # the run and its workers: one group, signalled and ended together
        head, fds, _, _ = socket.recv_fds(connection, _HEADER.size, 3)
        if len(fds) != 3 or len(head) != _HEADER.size:
            raise ValueError("no standard streams")
        (length,) = _HEADER.unpack(head)
        protocol, argv0, argv, cwd, environment, umask, streams = marshal.loads(_read_exactly(connection, length))
        if protocol != PROTOCOL:
            raise ValueError(f"protocol {protocol}")
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin, sys.stdout, sys.stderr = (_stream(fd, mode, settings) for fd, mode, settings in
                                             zip((0, 1, 2), ("rb", "wb", "wb"), streams))
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environment)
        os.umask(umask)
        sys.argv = [sys.argv[0] if argv0 is None else argv0, *argv]
        import threading

        threading.Thread(target=_end_with_client, args=(connection,), daemon=True).start()
        _send(connection, ("started", os.getpid()))
        from lintloop.cli import main

        status = main(argv)
    except SystemExit as exc:  # argparse's usage errors, --help: as the interpreter ends on them
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a bug: the client reports a run without an exit status
        os._exit(2)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    with contextlib.suppress(OSError):
        _send(connection, ("exit", status))
        connection.shutdown(socket.SHUT_WR)
    os._exit(0)


def _stream(fd: int, mode: str, settings: tuple[str, str, bool, bool] | None) -> Any:
    """A standard stream over `fd` as the client's interpreter made it (encoding, errors, buffering)."""
    binary = open(fd, mode, closefd=False)  # noqa: SIM115 - the process's stream
    if settings is None:
        return io.TextIOWrapper(binary)
    encoding, errors, line_buffering, write_through = settings
    return io.TextIOWrapper(binary, encoding=encoding, errors=errors, line_buffering=line_buffering,
                            write_through=write_through)


def _end_with_client(connection: socket.socket) -> None:
    """Wait for the client's end of the connection to close (it sends nothing after its request):
    then end this run's process group (this child and its workers)."""
    with contextlib.suppress(OSError):
        while connection.recv(1 << 16):
            pass
    os.killpg(os.getpgid(0), signal.SIGKILL)
