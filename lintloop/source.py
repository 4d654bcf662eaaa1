"""Reading a Python file's bytes into text, and writing text back exactly as it was encoded."""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import os
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]


class UndecodableSource(Exception):
    """The file is binary or not valid in its declared encoding; the message says which."""


@dataclass
class SourceText:
    """A file's text with what is needed to write it back unchanged: encoding, BOM, newline."""

    text: str
    encoding: str
    bom: bool
    newline: str

    @classmethod
    def from_bytes(cls, data: bytes) -> SourceText:
        if b"\x00" in data:
            raise UndecodableSource("file is binary (contains NUL bytes), not Python source")
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:  # unknown encoding in the coding cookie, or BOM + other cookie
            raise UndecodableSource(str(exc)) from None
        bom = data.startswith(codecs.BOM_UTF8)
        if bom:
            data = data[len(codecs.BOM_UTF8):]
            encoding = "utf-8"
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise UndecodableSource(
                f"cannot decode as {encoding}: byte {data[exc.start]:#04x} at offset {exc.start}"
            ) from None
        return cls(text=text, encoding=encoding, bom=bom, newline=_dominant_newline(text))

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def _dominant_newline(text: str) -> str:
    crlf = text.count("\r\n")
    return "\r\n" if crlf and crlf >= text.count("\n") - crlf else "\n"


def write_atomically(path: Path, data: bytes, unchanged_since: os.stat_result | None = None) -> bool:
    """Replace `path` (through a symbolic link: the file it points to) with `data`, so that an interruption
    leaves the old or the new file, never half of one; keeps the file's mode, and its owner where allowed.

    With `unchanged_since` (the file's status when it was read), a file modified since (by another
    process) is left as it is and False is returned: what that process wrote is not lost.
    The temporary file beside it is locked by its writer until renamed; one that nobody holds and
    that is over a second old was left by a writer that died (killed): it is removed here, the next
    time that file is written.
    """
    target = Path(os.path.realpath(path))
    status = target.stat()
    if not os.access(target, os.W_OK):  # a replace would go through: the directory, not the file, allows it
        raise PermissionError(errno.EACCES, "the file is read-only", str(path))
    prefix, suffix = f".{target.name}.", ".lintloop-tmp"
    for entry in os.scandir(target.parent):
        middle = entry.name[len(prefix):-len(suffix)]
        # mkstemp's random part has no dot: `.a.py.x.<random>.lintloop-tmp` belongs to `a.py.x`.
        if not (entry.name.startswith(prefix) and entry.name.endswith(suffix) and middle and "." not in middle):
            continue
        with contextlib.suppress(OSError):  # held by a live writer, or already gone
            if time.time() - entry.stat().st_mtime < 1:
                continue
            if fcntl is None:  # Windows: a file open in another process cannot be removed
                os.unlink(entry.path)
                continue
            with open(entry.path, "rb") as stale:
                fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.unlink(entry.path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_EX)  # released when closed: after the rename
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            if (status.st_uid, status.st_gid) != (os.geteuid(), os.getegid()):
                with contextlib.suppress(PermissionError):
                    os.chown(tmp, status.st_uid, status.st_gid)
            os.chmod(tmp, status.st_mode & 0o7777)  # after chown, which may clear set-id bits
            if unchanged_since is not None:
                now = target.stat()
                if (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != (
                        unchanged_since.st_dev, unchanged_since.st_ino, unchanged_since.st_size,
                        unchanged_since.st_mtime_ns):
                    os.unlink(tmp)
                    return False
            os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


def source_lines(text: str) -> list[str]:
    """The lines of `text`, ends kept, as Python's tokenizer (and LSP) count them: only \\n, \\r\\n
    and \\r end a line; `str.splitlines` also breaks at form feeds, \\x1c-\\x1e, \\x85, \\u2028..."""
    return io.StringIO(text, newline="").readlines()
