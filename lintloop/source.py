"""Reading a Python file's bytes into text, and writing text back exactly as it was encoded, in place."""

from __future__ import annotations

import codecs
import contextlib
import errno
import hashlib
import io
import os
import re
import stat
import time
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lintloop.user_cache import private_directory

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]


class UndecodableSource(Exception):
    """The file is binary or not valid in its declared encoding; the message says which, and `line`
    and `column` (1-based) where the first byte that cannot be read is."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line, self.column = line, column


@dataclass
class SourceText:
    """A file's text with what is needed to write it back unchanged: encoding, BOM, newline."""

    text: str
    encoding: str
    bom: bool
    newline: str

    @classmethod
    def from_bytes(cls, data: bytes) -> SourceText:
        """The text of a Python file's bytes, decoded as CPython reads a file it runs (PEP 263: the
        coding cookie of the first two lines, else UTF-8). Every byte must decode, a comment's too:
        `python FILE` stops at the first that does not ("Non-UTF-8 code starting with ..."), as ruff does
        (E902); only `compile()` of bytes, what an import runs, skips a comment's bytes unread."""
        if b"\x00" in data:
            raise UndecodableSource("file is binary (contains NUL bytes), not Python source")
        try:
            # Its first two lines as CPython's tokenizer reads them: a lone CR ends one too.
            first_lines = _FIRST_TWO_LINES.match(data)[0].splitlines(keepends=True)
            encoding, _ = tokenize.detect_encoding(iter(first_lines).__next__)
        except SyntaxError as exc:  # unknown encoding in the coding cookie, or BOM + other cookie
            raise UndecodableSource(str(exc)) from None
        bom = data.startswith(codecs.BOM_UTF8)
        if bom:
            data = data[len(codecs.BOM_UTF8):]
            encoding = "utf-8"
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as exc:
            line, column = _position_of(data, exc.start, encoding)
            raise UndecodableSource(f"cannot decode as {encoding}: byte {data[exc.start]:#04x}", line, column) from None
        except (LookupError, UnicodeError, ValueError) as exc:  # a cookie naming no text encoding (`rot13`, `zlib`)
            raise UndecodableSource(f"cannot decode as {encoding}: {exc}") from None
        return cls(text=text, encoding=encoding, bom=bom, newline=_dominant_newline(text))

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


_FIRST_TWO_LINES = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)?[^\r\n]*(?:\r\n|\r|\n)?")


def _position_of(data: bytes, offset: int, encoding: str) -> tuple[int, int]:
    """The line and 1-based column of byte `offset` (the first undecodable one) of `data`, as CPython
    counts lines (LF, CRLF or CR) and columns (characters of the decodable text before it)."""
    before = data[:offset].decode(encoding, "replace")
    line_start = max(before.rfind("\n"), before.rfind("\r")) + 1
    return len(source_lines(before[:line_start])) + 1, len(before) - line_start + 1


def _dominant_newline(text: str) -> str:
    if "\r" not in text:  # most files: one fast scan
        return "\n"
    crlf = text.count("\r\n")
    return "\r\n" if crlf and crlf >= text.count("\n") - crlf else "\n"


def write_in_place(path: Path, data: bytes, unchanged_since: os.stat_result | None = None,
                   within: tuple[str, ...] | None = None) -> bool:
    """Write `data` over the file at `path` (through a symbolic link: the file it points to) in place:
    the same inode, so the descriptors other processes hold (a logger appending to it) see the new
    text, and its mode, owner and extended attributes stay as they are.

    `within`: the resolved folders the file must really lie in (`fix`'s project): a file elsewhere, or
    one with other names (hard links, which may lie anywhere), is refused (`outside_reason`), checked on
    the file as opened.

    Crash-safe through a journal (the old and the new text) kept in the user's private cache folder
    (`journal_path`), never in the working tree: on disk before the file is touched and removed once
    the new text is, so that after a kill or a power loss the next `fix` of the file finishes the write
    from it (see `settled_for_reading`). Lintloop writers of one file take turns: each holds an
    exclusive `flock` on it while writing.

    With `unchanged_since` (the file's status when it was read), a file modified since (by another
    process) is left as it is and False is returned: what that process wrote is not lost; so is one
    that another process appends to while it is being written (the file is then as it left it).
    Raises OSError, the file unchanged, where it cannot be written in place: read-only (for root too),
    not a regular file, outside `within`, no room on the disk, no private folder for the journal, ...
    """
    target = Path(os.path.realpath(path))
    status = target.stat()
    if not stat.S_ISREG(status.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    if not _writable(target, status):
        raise PermissionError(errno.EACCES, "the file is read-only", str(path))
    fd = os.open(target, os.O_RDWR | os.O_NOFOLLOW | _OPEN_FLAGS)
    try:
        if within is not None:
            reason = _outside(target, os.fstat(fd), within)
            if reason is not None:
                raise PermissionError(errno.EPERM, f"not written: {reason}", str(path))
        _lock(fd)
        _recover(target, fd)
        old = _read_all(fd)
        journal = _write_journal(target, fd, old, data)
        try:
            written = False
            if unchanged_since is None or not _changed(target, fd, unchanged_since):
                written = _overwrite(fd, old, data)
                os.fsync(fd)
        except BaseException as error:
            try:
                restored = _bring_to(fd, _read_all(fd), old, data, goal=old)
            except OSError:
                restored = False
            if restored:
                os.unlink(journal)
            elif isinstance(error, OSError):
                raise OSError(error.errno, f"{error.strerror or error}; the write is unfinished: {journal} "
                                           "holds the file's text before and after") from error
            raise
        os.unlink(journal)
        return written
    finally:
        os.close(fd)


def outside_reason(path: Path, within: tuple[str, ...]) -> str | None:
    """Why `fix` may not write the file at `path` when bounded to the resolved folders `within`: it
    really lies elsewhere (a symbolic link, or a link among the folders above it, leads out), or it has
    other names (hard links) that may; None where it may be written. OSError if it cannot be looked at."""
    target = os.path.realpath(path)
    return _outside(Path(target), os.stat(target), within)


def _outside(target: Path, status: os.stat_result, within: tuple[str, ...]) -> str | None:
    if not any(_inside(str(target), folder) for folder in within):
        return f"it is a link to {target}, outside the project"
    if status.st_nlink > 1:
        return f"it has {status.st_nlink - 1} other name{'s' if status.st_nlink > 2 else ''} (hard links), " \
               "which may lie outside the project"
    return None


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder if folder.endswith(os.sep) else folder + os.sep)


@contextlib.contextmanager
def settled_for_reading(path: Path) -> Iterator[None]:
    """Around `fix`'s read of `path`: waits until no lintloop process is writing the file (through a
    symbolic link: its target) and finishes a write that a killed one left unfinished (from its journal),
    so that the read sees a whole text; other lintloop writers wait until the read is done.
    Only `fix` settles a file (`check` writes nothing). What cannot be settled (a file that cannot be
    opened, a journal that does not match the file) is left for the read, or `write_in_place`, to report."""
    fd = None
    with contextlib.suppress(OSError):
        target = Path(os.path.realpath(path))
        status = target.stat()
        # Opened for writing only to recover: a file watcher sees no write otherwise.
        writable = os.path.lexists(journal_path(status)) and _writable(target, status)
        fd = os.open(target, (os.O_RDWR if writable else os.O_RDONLY) | os.O_NOFOLLOW | _OPEN_FLAGS)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            _lock(fd)
            if writable:
                _recover(target, fd)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


# A header a person can read (the journal is theirs to compare when it cannot be used): the file's path
# (its length, then its bytes), then the sizes and digests of the two texts, then the texts.
_JOURNAL_HEADER = re.compile(rb"lintloop journal 2\npath (\d+)\n")
_JOURNAL_TEXTS = re.compile(rb"\nold (\d+) ([0-9a-f]{64})\nnew (\d+) ([0-9a-f]{64})\n")
LOCK_WAIT_SECONDS = 10.0  # a write takes milliseconds: a lock held longer is not a lintloop writer's
_OPEN_FLAGS = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)  # never wait on a FIFO put there
_PAGE = 4096  # `_between` compares a page at a time, byte by byte only where a page is neither text's


def _writable(target: Path, status: os.stat_result) -> bool:
    # The mode bits, not access(2) alone: root may write anything, yet a file without them is read-only.
    return bool(status.st_mode & 0o222) and os.access(target, os.W_OK)


def journal_path(status: os.stat_result) -> Path:
    """Where the journal of a write of the file with this status is kept: in the user's private folder
    (lintloop.user_cache), named by the file's device and inode. A working tree's files are never
    read as journals: one placed there (by a pull request) could otherwise make `fix` write its text."""
    return private_directory("journal") / f"{status.st_dev:x}-{status.st_ino:x}"


def _digest(text: bytes) -> bytes:
    return hashlib.sha256(text).hexdigest().encode()


def _journal_bytes(target: Path, old: bytes, new: bytes) -> bytes:
    name = os.fsencode(target)
    return (b"lintloop journal 2\npath %d\n%s\nold %d %s\nnew %d %s\n" % (
        len(name), name, len(old), _digest(old), len(new), _digest(new)) + old + new)


def _journal_texts(journal: bytes, target: Path) -> tuple[bytes, bytes] | None:
    """The old and the new text a journal of a write of `target` holds; None if it is incomplete or
    damaged, or it is another file's (an inode reused since)."""
    header = _JOURNAL_HEADER.match(journal)
    if header is None:
        return None
    name_end = header.end() + int(header[1])
    if journal[header.end():name_end] != os.fsencode(target):
        return None
    sizes = _JOURNAL_TEXTS.match(journal, name_end)
    if sizes is None:
        return None
    old_size, new_size = int(sizes[1]), int(sizes[3])
    texts = journal[sizes.end():]
    old, new = texts[:old_size], texts[old_size:]
    if len(texts) != old_size + new_size or _digest(old) != sizes[2] or _digest(new) != sizes[4]:
        return None
    return old, new


def _write_journal(target: Path, fd: int, old: bytes, new: bytes) -> Path:
    """The journal of a write of `new` over `old`, on disk (its name too) before the file is touched."""
    journal = journal_path(os.fstat(fd))
    journal_fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_BINARY", 0),
                         0o600)
    try:
        try:
            _write_at(journal_fd, _journal_bytes(target, old, new), 0)
            os.fsync(journal_fd)
        finally:
            os.close(journal_fd)
        if os.name == "posix":  # Windows cannot open a directory
            directory = os.open(journal.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
    except BaseException:
        os.unlink(journal)
        raise
    return journal


def _recover(target: Path, fd: int) -> None:
    """Resolve a journal a killed writer left for `target` (open as `fd` and locked: nobody is writing
    it). A journal that is incomplete, damaged or another file's was cut short before the file was
    touched, or is stale: removed. A file with the old or the new text: the journal is removed; one
    part-way from the old text to the new: the write is finished. A file changed since is left, journal
    and file, and reported."""
    journal = journal_path(os.fstat(fd))
    try:
        journal_fd = os.open(journal, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return
    with os.fdopen(journal_fd, "rb") as handle:
        texts = _journal_texts(handle.read(), target)
    if texts is not None:
        old, new = texts
        current = _read_all(fd)
        if current != old and not _bring_to(fd, current, old, new, goal=new):
            raise FileExistsError(
                errno.EEXIST, f"a `fix` of it was interrupted, and it was changed since: {journal} holds its "
                "text from before and after that fix; delete that file once this one is as it should be",
                str(journal))
    os.unlink(journal)


def _bring_to(fd: int, current: bytes, old: bytes, new: bytes, goal: bytes) -> bool:
    """Make the file, left at `current` by a write of `new` over `old` that did not finish, hold `goal`
    (one of the two); False, nothing changed, if `current` is no state of that write (someone else's)."""
    if current == goal:
        return True
    if not _between(current, old, new) or not _overwrite(fd, current, goal):
        return False
    os.fsync(fd)
    return True


def _between(current: bytes, old: bytes, new: bytes) -> bool:
    """Whether an in-place write of `new` over `old` passes through `current` (interrupted there, on
    any byte: a kill stops a write between pages, a power loss between disk sectors): each byte is the
    old or the new text's at its offset, or NUL past the old text's end (a crash may leave an extension
    unwritten), and the size is the old text's, the new one's or, growing, in between."""
    size = len(current)
    if size not in (len(old), len(new)) and not len(old) < size < len(new):
        return False
    for start in range(0, size, _PAGE):
        page = current[start:start + _PAGE]
        if page in (old[start:start + _PAGE], new[start:start + _PAGE]):
            continue
        for offset in range(start, start + len(page)):
            byte = current[offset]
            if not (offset < len(new) and byte == new[offset] or offset < len(old) and byte == old[offset]
                    or offset >= len(old) and byte == 0):
                return False
    return True


def _overwrite(fd: int, current: bytes, new: bytes) -> bool:
    """Turn the file, holding `current`, into `new`, never overwriting or cutting off what another process
    appends meanwhile (a logger): the file grows only by an append of its own, which lands after any
    other, and is cut short only if none was made. False if another process appended first: the file
    is then `current` followed by what it appended, as that process left it."""
    if len(new) > len(current):
        tail = new[len(current):]
        landed = _append(fd, tail)
        if landed != len(current):  # another process appended first: take ours back off the end
            if os.fstat(fd).st_size != landed + len(tail):
                raise OSError(errno.EBUSY, "another process kept appending to the file while it was written")
            os.ftruncate(fd, landed)
            return False
        _write_at(fd, new[:len(current)], 0)
        return True
    _write_at(fd, new, 0)
    if len(new) < len(current):
        if os.fstat(fd).st_size != len(current):  # another process appended: put the text back as it was
            _write_at(fd, current[:len(new)], 0)
            return False
        os.ftruncate(fd, len(new))
    return True


def _append(fd: int, data: bytes) -> int:
    """Append `data` with one write (appends do not interleave: each lands whole, at the end then);
    the offset where it landed."""
    if fcntl is None:  # Windows has no O_APPEND to switch on: a seek to the end is the nearest
        landed = os.lseek(fd, 0, os.SEEK_END)
        _write_at(fd, data, landed)
        return landed
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_APPEND)
    try:
        written = os.write(fd, data)
    finally:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
    if written != len(data):  # a regular file takes a write whole unless its disk fills up
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return os.lseek(fd, 0, os.SEEK_CUR) - written


def _write_at(fd: int, data: bytes, offset: int) -> None:
    os.lseek(fd, offset, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _changed(target: Path, fd: int, since: os.stat_result) -> bool:
    """Whether the file was written since `since`, or its name now holds another file."""
    return any((now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != (
        since.st_dev, since.st_ino, since.st_size, since.st_mtime_ns) for now in (os.fstat(fd), target.stat()))


def _lock(fd: int) -> None:
    """Take the file's lintloop lock (an exclusive `flock`), waiting for another process's write to end."""
    if fcntl is None:  # Windows
        return
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise BlockingIOError(errno.EWOULDBLOCK, "another process holds the file locked") from None
            time.sleep(0.01)


def source_lines(text: str) -> list[str]:
    """The lines of `text`, ends kept, as Python's tokenizer (and LSP) count them: only \\n, \\r\\n
    and \\r end a line; `str.splitlines` also breaks at form feeds, \\x1c-\\x1e, \\x85, \\u2028..."""
    return io.StringIO(text, newline="").readlines()
