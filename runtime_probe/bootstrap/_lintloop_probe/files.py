"""What the probed program does to files: an audit hook (PEP 578) that emits one ``file`` event per
path and action, the first time this process does it.

Seen: every ``open`` for writing (``open()``, ``os.open``, ``pathlib``, anything in Python that opens a
file), ``os.remove`` / ``os.unlink``, ``os.rename`` / ``os.replace``, ``os.mkdir``, ``os.rmdir`` and
``shutil.rmtree``.  Not seen: what native code writes without going through Python (a C++ library's
own file I/O), and programs in other languages that the script starts.  This is a report of what the
program did, not a sandbox: nothing is blocked or undone.

Left out: compiled bytecode (``__pycache__``) and device files (``/dev``, ``/proc``).  At most
``_LIMIT`` events per process; past it a single ``file_limit`` event says that more were left out.
"""
import os
import sys

from .events import emit, probe_error

_LIMIT = 200
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR
# audit event -> (action, index of the path argument)
_PATH_EVENTS = {"os.remove": ("remove", 0), "os.rmdir": ("rmdir", 0), "os.mkdir": ("mkdir", 0),
                "shutil.rmtree": ("rmtree", 0)}
_SKIPPED_PREFIXES = ("/dev/", "/proc/", "/sys/")


class _Seen:
    keys = set()
    count = 0
    busy = False


def install():
    """Add the audit hook (it cannot be removed; it lives as long as the process)."""
    sys.addaudithook(_hook)
    if hasattr(os, "register_at_fork"):  # a forked child reports its own writes
        os.register_at_fork(after_in_child=_reset)


def _reset():
    _Seen.keys = set()
    _Seen.count = 0
    _Seen.busy = False


def _hook(event, args):
    if event == "open":
        if len(args) < 3 or not isinstance(args[2], int) or not args[2] & _WRITE_FLAGS:
            return
        action, path, target = "write", args[0], None
    elif event == "os.rename":
        action, path, target = "rename", args[0], args[1]
    elif event in _PATH_EVENTS:
        action, index = _PATH_EVENTS[event]
        path, target = args[index], None
    else:
        return
    if _Seen.busy:
        return
    _Seen.busy = True  # emitting must not report itself
    try:
        _record(action, path, target)
    except Exception as exc:
        probe_error("files", exc)
    finally:
        _Seen.busy = False


def _record(action, path, target):
    name = _absolute(path)
    if name is None or name.startswith(_SKIPPED_PREFIXES) or "__pycache__" in name:
        return
    key = (action, name)
    if key in _Seen.keys:
        return
    _Seen.keys.add(key)
    _Seen.count += 1
    if _Seen.count > _LIMIT:
        if _Seen.count == _LIMIT + 1:
            emit({"type": "file_limit", "limit": _LIMIT}, site=False)
        return
    event = {"type": "file", "action": action, "path": name}
    if target is not None:
        event["to"] = _absolute(target)
    emit(event)


def _absolute(path):
    """An absolute path for a str / bytes / PathLike; None for a file descriptor."""
    if isinstance(path, int):
        return None
    try:
        return os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError):
        return None
