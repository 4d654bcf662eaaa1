"""What the probed program does to files: an audit hook (PEP 578) that emits one ``file`` event per
path and action, the first time this process does it.

Seen: every ``open`` for writing (``open()``, ``os.open``, ``pathlib``, anything in Python that opens a
file), ``os.truncate``, ``os.remove`` / ``os.unlink``, ``os.rename`` / ``os.replace``, ``os.mkdir``,
``os.rmdir``, ``os.symlink``, ``os.link`` and ``shutil.rmtree``.  Not seen: what native code writes
without going through Python (a C++ library's own file I/O), and programs in other languages that the
script starts.  This is a report of what the program did, not a sandbox: nothing is blocked or undone.

An audit event comes before the call, which may then fail: each event says where its path stood just
before (``before``: the entry as ``entry`` describes it, or None where there was none), and the runner
compares that with where it stands after the run -- a path that never existed, or that the call did
not change, is no change.  Paths are absolute, with the links in their folders resolved (for ``open``,
the link at the end too: the file written is the one it points to); a path relative to a directory
descriptor (``shutil.rmtree`` removes a tree through them) is resolved through it; where it cannot
be, the path is left out.

Left out: compiled bytecode (``__pycache__``) and device files (``/dev``, ``/proc``).  At most
``_LIMIT`` events per process; past it a single ``file_limit`` event says that more were left out.
"""
import os
import stat
import sys

from .events import emit, probe_error

_LIMIT = 200
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR
# audit event -> (action, index of the path argument, index of its directory descriptor or None, follow the
# link at the end of the path)
_PATH_EVENTS = {"os.remove": ("remove", 0, 1), "os.rmdir": ("rmdir", 0, 1), "os.mkdir": ("mkdir", 0, 2),
                "shutil.rmtree": ("rmtree", 0, 1), "os.symlink": ("symlink", 1, 2), "os.link": ("link", 1, 3),
                "os.truncate": ("write", 0, None)}
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
    elif event != "os.rename" and event not in _PATH_EVENTS:
        return
    if _Seen.busy:
        return
    _Seen.busy = True  # emitting must not report itself
    try:
        if event == "open":
            _record("write", _resolve(args[0], None, follow=True))
        elif event == "os.rename":
            _record("rename", _resolve(args[0], _arg(args, 2)), _resolve(args[1], _arg(args, 3)))
        else:
            action, index, dir_fd = _PATH_EVENTS[event]
            _record(action, _resolve(args[index], _arg(args, dir_fd)))
    except Exception as exc:
        probe_error("files", exc)
    finally:
        _Seen.busy = False


def _arg(args, index):
    return args[index] if index is not None and index < len(args) else None


def _record(action, name, target=None):
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
    event = {"type": "file", "action": action, "path": name, "before": entry(name)}
    if target is not None:
        event["to"], event["to_before"] = target, entry(target)
    emit(event)


def _resolve(path, dir_fd, follow=False):
    """The absolute path the call will act on, its folders' links resolved (with `follow`, the link at its end
    too); None for a file descriptor, or a path relative to a directory descriptor that cannot be read back."""
    if isinstance(path, int) or path is None:
        return None
    try:
        name = os.fsdecode(path)
    except (TypeError, ValueError):
        return None
    if not os.path.isabs(name) and isinstance(dir_fd, int) and dir_fd >= 0:
        folder = _folder_of(dir_fd)
        if folder is None:
            return None
        name = os.path.join(folder, name)
    name = os.path.abspath(name)
    if follow:
        return os.path.realpath(name)
    folder, base = os.path.split(name)
    return os.path.join(os.path.realpath(folder), base) if base else os.path.realpath(folder)


def _folder_of(dir_fd):
    """The path of the directory open as `dir_fd` (Linux: /proc; macOS: F_GETPATH); None where unknown."""
    try:
        return os.readlink(f"/proc/self/fd/{dir_fd}")
    except OSError:
        pass
    try:
        import fcntl

        return os.fsdecode(fcntl.fcntl(dir_fd, fcntl.F_GETPATH, bytes(1024)).rstrip(b"\0"))
    except (ImportError, AttributeError, OSError, ValueError):
        return None


def entry(name):
    """Where `name` stands now, links not followed: [kind, size, mtime_ns, inode, device, mode, link target],
    kind one of file, directory, symlink, other; None where there is nothing (or it cannot be seen)."""
    try:
        info = os.lstat(name)
    except (OSError, ValueError):
        return None
    mode = info.st_mode
    kind = ("file" if stat.S_ISREG(mode) else "directory" if stat.S_ISDIR(mode) else
            "symlink" if stat.S_ISLNK(mode) else "other")
    target = None
    if kind == "symlink":
        try:
            target = os.readlink(name)
        except OSError:
            pass
    return [kind, info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev, stat.S_IMODE(mode), target]
