"""The per-file result cache of `lintloop check` (`.lintloop_cache/` under the project root).

One JSON file per (file content, lintloop version, Python implementation, libcst version, the
engine's source files (size and mtime: an edited rule in a source checkout invalidates the cache),
rule selection, per-rule options, display path, mode, named or found in a directory): everything in
the file that can change its findings. It holds the findings and whether the file was passed over
unparsed (found in a directory, without deep-learning code: docs/architecture.md, "What is parsed").
A finding may also depend on other modules of the linted project (a helper imported from
`losses.py`): the entry records each module consulted with its content digest, and is a miss
when one of them changed, appeared or disappeared. Entries
are JSON only — never pickle, never `eval` — and each is checked before use:

* it stores its own key, which must match the key it was looked up by;
* it stores a sha256 digest of the canonical JSON of what it holds, recomputed on every read;
* every field of every finding is type-checked against the finding schema.

An entry that fails any check (corrupt or truncated JSON, a partial write, an accidental edit, a
file of another format, a field it was not written with or of the wrong type, a size over
`MAX_ENTRY_BYTES`, anything but a regular file: a symlink, a FIFO, a device) is a miss: the file is linted again and the entry rewritten.
The digest is a checksum, not a signature: it detects corruption and accidental edits, but anyone
who can write the cache directory can also rewrite the digest, so it is no defence against a
deliberate forger — only the schema check limits what such an entry can contain (findings with
the right types, nothing executable). Keep the cache directory as private as the source tree.

Writes are atomic (a temporary file, then `os.replace`), so concurrent runs and workers never see
half an entry. The cache is bounded: `prune` (run once at the end of a run, in the parent process)
removes the least recently used entries — oldest modification time first; a hit refreshes it —
until the total is at most `LOW_WATER` of `max_bytes`. An unwritable cache directory, or a file
where it should be, means the run is uncached; it never fails.

The cache touches nothing outside itself. Its directory, its shard directories and its entries are
opened with `O_NOFOLLOW` (and `O_DIRECTORY`), everything below the cache directory relative to a
descriptor of its directory (`dir_fd`): a symbolic link is never followed, not even one swapped in
during a run. A cache directory that is a symbolic link, or owned by another user, is foreign: the
run is uncached, silently, as for an unwritable one (the findings are the same; a warning on every
run of a pre-commit hook or editor would be noise). `prune` removes only files named as entries
(`<2 hex>/<64 hex, starting with those 2>.json`, or such a name plus `.<pid>.tmp`) that also begin as
an entry does (`{"format":N,"key":"<the key in the name>"`); any other file is left alone and not
counted. A platform that cannot open files relative to a directory without following links runs
uncached.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from lintloop.digests import ABSENT
from lintloop.engine_identity import engine_identity
from lintloop.finding import Edit, Finding, Fix

CACHE_DIR_NAME = ".lintloop_cache"
FORMAT = 4  # bump when the entry layout changes
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
LOW_WATER = 0.8  # prune down to this fraction of the bound, so that the next runs need not prune again
TOUCH_AFTER_S = 3600.0  # a hit refreshes an entry's mtime (for LRU pruning) at most hourly: warm runs write nothing
MAX_ENTRY_BYTES = 16 * 1024 * 1024  # a larger entry is a miss, never read into memory
STALE_TMP_S = 3600.0  # temporary files of crashed writers older than this are removed by `prune`

CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This file is a cache directory tag created by lintloop.\n"
                "# For information about cache directory tags, see https://bford.info/cachedir/\n")

_INT_FIELDS = ("line", "column", "end_line", "end_column")
_STR_FIELDS = ("code", "name", "message", "kind", "severity")
# The fields an entry is written with: one with any other field was not written by this version.
_ENTRY_KEYS = {"format", "key", "sha256", "findings", "depends", "passed_over"}
_TEXT_FIELDS = ("help", "note")  # null in the JSON where empty
_FINDING_KEYS = {"path", *_INT_FIELDS, *_STR_FIELDS, *_TEXT_FIELDS, "fix", "probe", "suppression_lines", "cell"}
_FIX_KEYS = {"applicability", "edits", "description"}
_EDIT_KEYS = {*_INT_FIELDS, "content", "cell"}

_SHARD_NAME = re.compile(r"[0-9a-f]{2}")
_ENTRY_NAME = re.compile(r"(?P<key>[0-9a-f]{64})\.json(?:\.\d+\.tmp)?")  # an entry, or its temporary file
# How every entry (of any format so far) begins, naming its own key: what `prune` checks before removing.
_ENTRY_HEAD = re.compile(rb'\{"format":\d{1,9},"key":"(?P<key>[0-9a-f]{64})"')
_ENTRY_HEAD_BYTES = 96  # enough for _ENTRY_HEAD

_DIRECTORY_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
                    | getattr(os, "O_CLOEXEC", 0))
# Opening without following links, relative to directory descriptors: without it the cache is off.
_NO_FOLLOW_SUPPORTED = (hasattr(os, "O_DIRECTORY") and hasattr(os, "O_NOFOLLOW")
                       and {os.open, os.mkdir, os.stat, os.access, os.unlink, os.rename} <= os.supports_dir_fd
                       and {os.scandir, os.utime} <= os.supports_fd)


@functools.lru_cache(maxsize=16)
def _key_header(environment: str, codes: tuple[str, ...], options: str, mode: str, explicit: bool) -> hashlib._Hash:
    """The digest of what every file of a run shares in its key, computed once: each key copies it."""
    return hashlib.sha256(json.dumps([FORMAT, environment, mode, list(codes), options, explicit]).encode() + b"\0")


class ResultCache:
    """Findings per file, on disk. Cheap to construct (no I/O): each worker makes its own."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._identity: tuple[int, int] | None = None  # (device, inode) of the directory `open` checked

    @classmethod
    def open(cls, root: Path, max_bytes: int | None = None) -> ResultCache | None:
        """The cache under `root`, created (with `CACHEDIR.TAG` and a `.gitignore`) if need be;
        None where it cannot be written or is foreign (a symbolic link, another user's)."""
        cache = cls(root / CACHE_DIR_NAME, DEFAULT_MAX_BYTES if max_bytes is None else max_bytes)
        with cache_directory(cache.directory, create=True) as directory_fd:
            if directory_fd is None:
                return None
            try:
                for name, text in (("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", "# created by lintloop\n*\n")):
                    try:
                        os.stat(name, dir_fd=directory_fd, follow_symlinks=False)
                    except FileNotFoundError:  # whatever is there already is left as it is
                        write_atomically(directory_fd, name, text.encode())
                if not os.access(".", os.W_OK, dir_fd=directory_fd):
                    return None
            except OSError:
                return None
            cache._identity = _identity(directory_fd)
        engine_identity()  # once, here: forked workers inherit it
        return cache

    @contextlib.contextmanager
    def _own_directory(self) -> Iterator[int | None]:
        """A descriptor of the cache directory; None where it is foreign now, or is not the
        directory `open` checked (replaced since)."""
        with cache_directory(self.directory) as directory_fd:
            replaced = directory_fd is not None and self._identity not in (None, _identity(directory_fd))
            yield None if replaced else directory_fd

    @contextlib.contextmanager
    def _shard(self, name: str, create: bool = False) -> Iterator[int | None]:
        """A descriptor of a shard directory (None where it is absent, foreign or not a directory)."""
        with self._own_directory() as directory_fd:
            if directory_fd is None:
                yield None
                return
            with subdirectory(directory_fd, name, create) as shard_fd:
                yield shard_fd

    # -- entries --------------------------------------------------------------------------------

    @staticmethod
    def key(display: str, codes: tuple[str, ...] | list[str], options: str, data: bytes, mode: str = "check",
            explicit: bool = True) -> str:
        """`explicit`: the file was named (a file found in a directory may be passed over unparsed)."""
        digest = _key_header(engine_identity(), tuple(sorted(codes)), options, mode, explicit).copy()
        digest.update(json.dumps(display).encode() + b"\0")
        digest.update(data)
        return digest.hexdigest()

    def entry_path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> CachedLint | None:
        """The cached result, or None for a miss (absent, unreadable or invalid entry)."""
        with self._shard(key[:2]) as shard_fd:
            opened = None if shard_fd is None else _open_regular(f"{key}.json", MAX_ENTRY_BYTES, dir_fd=shard_fd)
            if opened is None:
                return None
            stream, st = opened
            with stream:
                try:
                    raw = stream.read(MAX_ENTRY_BYTES + 1)
                except OSError:
                    return None
                cached = decode_entry(raw, key)
                if cached is not None and time.time() - st.st_mtime > TOUCH_AFTER_S:
                    try:
                        os.utime(stream.fileno())  # the file read, whatever its name points to now
                    except OSError:
                        pass  # read-only: the entry is still good
        return cached

    def put(self, key: str, findings: list[Finding], dependencies: dict[str, str] | None = None,
            passed_over: bool = False) -> bool:
        """Store the findings, and the other files they depend on (path -> content digest, "" for a
        file that was looked for and is absent), and whether the file was passed over unparsed (no
        deep-learning code); False where they could not be written (the run goes on uncached)."""
        with self._shard(key[:2], create=True) as shard_fd:
            if shard_fd is None:
                return False
            try:
                write_atomically(shard_fd, f"{key}.json", encode_entry(key, findings, dependencies or {}, passed_over))
            except OSError:
                return False
        return True

    # -- size bound -----------------------------------------------------------------------------

    def entries(self) -> list[tuple[float, int, Path]]:
        """(mtime, bytes on disk, path) of every file named as an entry or an entry's temporary file
        (regular files only; vanished files are skipped)."""
        return [(mtime, size, self.directory / shard / name) for mtime, size, shard, name in self._listing()]

    def _listing(self) -> list[tuple[float, int, str, str]]:
        """`entries` with (shard, name) for the path: what `prune` reads of each of thousands of files
        (a path object apiece would cost half of it)."""
        found = []
        with self._own_directory() as directory_fd:
            if directory_fd is None:
                return []
            try:
                with os.scandir(directory_fd) as items:
                    shards = sorted(d.name for d in items if _SHARD_NAME.fullmatch(d.name)
                                    and d.is_dir(follow_symlinks=False))
            except OSError:
                return []
            for shard in shards:
                with subdirectory(directory_fd, shard) as shard_fd:
                    if shard_fd is None:
                        continue
                    try:
                        with os.scandir(shard_fd) as items:
                            for item in items:
                                if _entry_key(shard, item.name) is None:
                                    continue
                                try:
                                    st = item.stat(follow_symlinks=False)
                                except OSError:
                                    continue
                                if stat.S_ISREG(st.st_mode):
                                    found.append((st.st_mtime, _usage(st), shard, item.name))
                    except OSError:
                        continue
        return found

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def prune(self) -> int:
        """Remove the least recently used entries while the cache exceeds its bound, down to
        `LOW_WATER` of it; also stale temporary files. Removes only files that verify as entries.
        Safe against concurrent runs. Returns the number of files removed."""
        now = time.time()
        doomed, entries = [], []
        for mtime, size, shard, name in self._listing():
            if not name.endswith(".tmp"):
                entries.append((mtime, size, shard, name))
            elif now - mtime > STALE_TMP_S:
                doomed.append((shard, name))  # left by a crashed writer
        total = sum(entry[1] for entry in entries)
        if total > self.max_bytes:
            target = int(self.max_bytes * LOW_WATER)
            for _, size, shard, name in sorted(entries, key=lambda e: e[0]):
                if total <= target:
                    break
                doomed.append((shard, name))
                total -= size  # gone, by us or by a concurrent run, or not ours (and then not counted)
        removed = 0
        shards: dict[str, list[str]] = {}
        for shard, name in doomed:
            shards.setdefault(shard, []).append(name)
        for shard, names in shards.items():
            with self._shard(shard) as shard_fd:
                if shard_fd is not None:
                    removed += sum(_unlink_entry(shard_fd, shard, name) for name in names)
        return removed


# -- entry format -------------------------------------------------------------------------------

@dataclass(frozen=True)
class CachedLint:
    """What an entry holds: a file's findings, and whether it was passed over unparsed."""

    findings: list[Finding]
    passed_over: bool = False


def _canonical(findings: list[dict[str, Any]], depends: list[list[str]] | None = None,
               passed_over: bool = False) -> bytes:
    """What the digest covers: the findings, the files they depend on (where there are any), and
    whether the file was passed over."""
    covered: Any = [findings, depends, passed_over]
    return json.dumps(covered, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def finding_to_json(finding: Finding) -> dict[str, Any]:
    """The JSON output's fields, and what it leaves out: the fix description and suppression lines."""
    data = finding.to_json()
    if finding.fix is not None:
        data["fix"]["description"] = finding.fix.description
    data["suppression_lines"] = list(finding.suppression_lines)
    return data


def encode_entry(key: str, findings: list[Finding], dependencies: dict[str, str] | None = None,
                 passed_over: bool = False) -> bytes:
    payload = [finding_to_json(f) for f in findings]
    depends = sorted([path, digest] for path, digest in (dependencies or {}).items())
    digest = hashlib.sha256(_canonical(payload, depends, passed_over)).hexdigest()
    return json.dumps({"format": FORMAT, "key": key, "sha256": digest, "findings": payload, "depends": depends,
                       "passed_over": passed_over}, separators=(",", ":")).encode("ascii")


def decode_entry(raw: bytes, key: str) -> CachedLint | None:
    """What a valid entry for `key` holds, or None: any defect is a miss, never an error."""
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError):  # corrupt, truncated, not UTF-8 (a pickle, say), absurdly nested
        return None
    if not isinstance(entry, dict) or entry.keys() != _ENTRY_KEYS or entry.get("format") != FORMAT \
            or entry.get("key") != key:
        return None
    payload, depends, passed_over = entry.get("findings"), entry.get("depends"), entry.get("passed_over")
    if not isinstance(payload, list) or not isinstance(entry.get("sha256"), str) or not isinstance(passed_over, bool):
        return None
    if not isinstance(depends, list) or not all(
            isinstance(d, list) and len(d) == 2 and all(isinstance(part, str) for part in d) for d in depends):
        return None
    try:
        if hashlib.sha256(_canonical(payload, depends, passed_over)).hexdigest() != entry["sha256"]:
            return None
    except (ValueError, RecursionError):
        return None
    if any(dependency_digest(path) != digest for path, digest in depends):
        return None  # a module the findings depend on changed
    findings = []
    for item in payload:
        finding = _finding_from_json(item)
        if finding is None:
            return None
        findings.append(finding)
    return CachedLint(findings, passed_over)


def _is_int(value: object) -> bool:
    return type(value) is int  # not bool


def _finding_from_json(data: object) -> Finding | None:
    # A finding is on the linted file, or (lintloop.project_view) on another module of its project.
    if not isinstance(data, dict) or not isinstance(data.get("path"), str) or not _FINDING_KEYS >= data.keys():
        return None
    if not all(_is_int(data.get(k)) for k in _INT_FIELDS) or not all(isinstance(data.get(k), str) for k in _STR_FIELDS):
        return None
    if not all(data.get(k) is None or isinstance(data.get(k), str) for k in _TEXT_FIELDS):
        return None
    probe = data.get("probe")
    lines = data.get("suppression_lines")
    if not (probe is None or isinstance(probe, dict)):
        return None
    if not isinstance(lines, list) or not all(_is_int(n) for n in lines):
        return None
    raw_fix = data.get("fix")
    fix = None
    if raw_fix is not None:
        if (not isinstance(raw_fix, dict) or raw_fix.keys() != _FIX_KEYS
                or raw_fix.get("applicability") not in ("safe", "unsafe")):
            return None
        description, edits = raw_fix.get("description"), raw_fix.get("edits")
        if not isinstance(description, str) or not isinstance(edits, list):
            return None
        parsed = []
        for edit in edits:
            if (not isinstance(edit, dict) or not _EDIT_KEYS >= edit.keys()
                    or not all(_is_int(edit.get(k)) for k in _INT_FIELDS)
                    or not isinstance(edit.get("content"), str)):
                return None
            if not _is_cell(edit.get("cell")):
                return None
            parsed.append(Edit(edit["line"], edit["column"], edit["end_line"], edit["end_column"], edit["content"],
                               edit.get("cell")))
        fix = Fix(raw_fix["applicability"], tuple(parsed), description)
    if not _is_cell(data.get("cell")):
        return None
    return Finding(data["path"], *(data[k] for k in _INT_FIELDS), *(data[k] for k in _STR_FIELDS),
                   fix=fix, probe=probe, suppression_lines=tuple(lines), cell=data.get("cell"),
                   help=data.get("help") or "", note=data.get("note") or "")


def _is_cell(value: object) -> bool:
    return value is None or _is_int(value)


# -- file system helpers ------------------------------------------------------------------------

@contextlib.contextmanager
def cache_directory(directory: Path, create: bool = False) -> Iterator[int | None]:
    """A descriptor of the cache directory `directory` (created if `create`), or None where it is
    absent, not a directory, a symbolic link, another user's or cannot be opened. The directories
    above it are followed as usual (a project may well live behind a link); `directory` itself
    never is. Shared with the probe-verdict store, which lives in it."""
    descriptor = _open_cache_directory(directory, create) if _NO_FOLLOW_SUPPORTED else None
    try:
        yield descriptor
    finally:
        if descriptor is not None:
            os.close(descriptor)


def _open_cache_directory(directory: Path, create: bool) -> int | None:
    try:
        parent_fd = os.open(directory.parent, _DIRECTORY_FLAGS & ~os.O_NOFOLLOW)  # links above: followed
    except OSError:
        return None
    try:
        descriptor = _open_subdirectory(parent_fd, directory.name, create)
    finally:
        os.close(parent_fd)
    if descriptor is None:
        return None
    try:
        # Another user's directory is theirs to fill with forged entries (or to empty): not used.
        foreign = hasattr(os, "geteuid") and os.fstat(descriptor).st_uid != os.geteuid()
    except OSError:
        foreign = True
    if foreign:
        os.close(descriptor)
        return None
    return descriptor


@contextlib.contextmanager
def subdirectory(directory_fd: int, name: str, create: bool = False) -> Iterator[int | None]:
    """A descriptor of the directory `name` in the directory open as `directory_fd` (created if
    `create`), never through a symbolic link; None where there is none."""
    descriptor = _open_subdirectory(directory_fd, name, create)
    try:
        yield descriptor
    finally:
        if descriptor is not None:
            os.close(descriptor)


def _open_subdirectory(directory_fd: int, name: str, create: bool) -> int | None:
    try:
        if create:
            try:
                os.mkdir(name, 0o777, dir_fd=directory_fd)
            except FileExistsError:  # a link or a file there is not replaced: opening it fails below
                pass
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=directory_fd)
    except OSError:  # ELOOP: a symbolic link; ENOTDIR: a file; ENOENT: absent
        return None


def _identity(descriptor: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(descriptor)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _entry_key(shard: str, name: str) -> str | None:
    """The key of an entry (or of its temporary file) named `name` in shard `shard`; None for any
    other name."""
    match = _ENTRY_NAME.fullmatch(name)
    if match is None or not _SHARD_NAME.fullmatch(shard) or not match["key"].startswith(shard):
        return None
    return match["key"]


def _unlink_entry(shard_fd: int, shard: str, name: str) -> int:
    """Remove the file `name` of the shard open as `shard_fd` if it is an entry (or a temporary file
    of one) by its name and by how it begins: 1 if removed, 0 if left alone or already gone."""
    key = _entry_key(shard, name)
    opened = None if key is None else _open_regular(name, dir_fd=shard_fd)
    if opened is None:
        return 0
    stream, st = opened
    try:
        with stream:
            head = _ENTRY_HEAD.match(stream.read(_ENTRY_HEAD_BYTES))
        if head is None or head["key"].decode() != key:
            return 0  # not written by lintloop
        now = os.stat(name, dir_fd=shard_fd, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return 0  # replaced since it was checked
        os.unlink(name, dir_fd=shard_fd)
    except OSError:  # FileNotFoundError: a concurrent run pruned it first
        return 0
    return 1


def _open_regular(path: str | os.PathLike[str], max_bytes: int | None = None, follow_symlinks: bool = False,
                  dir_fd: int | None = None) -> tuple[BinaryIO, os.stat_result] | None:
    """`path` (relative to `dir_fd` if given) open for reading and its status, or None unless it is a
    regular file (of at most `max_bytes`). Opened without blocking: a FIFO planted in the cache would
    otherwise block the run until something writes to it; a symlink to /dev/zero is a device, never read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)  # entries are written as regular files, never links
    try:
        descriptor = os.open(path, flags, dir_fd=dir_fd)
    except OSError:  # absent, unreadable, a symlink where none may be (ELOOP)
        return None
    try:
        st = os.fstat(descriptor)
        if stat.S_ISREG(st.st_mode) and (max_bytes is None or st.st_size <= max_bytes):
            return os.fdopen(descriptor, "rb"), st
    except OSError:
        pass
    os.close(descriptor)
    return None


def read_module(path: str, max_bytes: int) -> bytes | None:
    """The content of the regular file at `path` (through symbolic links), never blocking on a FIFO
    or reading a device; None where there is none, or it is over `max_bytes`."""
    opened = _open_regular(path, max_bytes, follow_symlinks=True)
    if opened is None:
        return None
    stream, _ = opened
    with stream:
        try:
            return stream.read(max_bytes + 1)
        except OSError:
            return None


def read_regular(directory_fd: int, name: str, max_bytes: int) -> bytes | None:
    """The content of the regular file `name` in the directory open as `directory_fd`, never through
    a symbolic link nor blocking; None where there is no such file or it is over `max_bytes`."""
    opened = _open_regular(name, max_bytes, dir_fd=directory_fd)
    if opened is None:
        return None
    stream, _ = opened
    try:
        with stream:
            raw = stream.read(max_bytes + 1)
    except OSError:
        return None
    return raw if len(raw) <= max_bytes else None


# What the files a run reads are, computed once per run where a process serves one run and ends (a
# CLI worker: `read_once_per_run`), not once per file that asks: the listing of a directory of 10,000
# modules, read for each of them, made a run quadratic. (kind, key) -> the answer; None: each asked afresh
# (a language server's long-lived worker, where files change between requests).
_RUN_READS: dict[tuple[str, str], Any] | None = None


def read_once_per_run() -> None:
    """This process serves one run and then ends: directory listings, dependency digests and the
    project's import index (lintloop.project_view) are read once in it (as of their first read: a
    file changed while the run goes on is seen as the run first saw it)."""
    global _RUN_READS
    _RUN_READS = {}


def once_per_run(kind: str, key: str, compute: Callable[[], Any]) -> Any:
    """`compute()`, once per run where `read_once_per_run` was called, else every time."""
    if _RUN_READS is None:
        return compute()
    found = _RUN_READS.get((kind, key), _RUN_READS)
    if found is _RUN_READS:
        found = _RUN_READS[kind, key] = compute()
    return found


def listing_digest(directory: str) -> str:
    """What a directory's Python modules are (their names): a finding that depends on which modules
    sit beside a file (lintloop.project_view.importers) records it, so that a module added there
    invalidates it."""
    return once_per_run("listing", directory, lambda: _listing_digest(directory))


def _listing_digest(directory: str) -> str:
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".py"))
    except OSError:
        return ABSENT
    return "listing:" + hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()


def dependency_digest(path: str) -> str:
    """What `file_digest(path)` gives for what a real entry depends on: a module file's sha256, or
    `ABSENT` for a path looked for and not there; for a directory, its `listing_digest`. Anything else
    that a hostile entry might name (a FIFO, a device) matches no recorded digest, and is never read."""
    return once_per_run("digest", path, lambda: _dependency_digest(path))


def _dependency_digest(path: str) -> str:
    opened = _open_regular(path, follow_symlinks=True)
    if opened is None:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return ABSENT
        if stat.S_ISDIR(mode):
            return listing_digest(path)
        # An unreadable file: what file_digest cannot open; a FIFO or device: no match.
        return ABSENT if stat.S_ISREG(mode) else "not a regular file"
    stream, _ = opened
    digest = hashlib.sha256()
    try:
        with stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return ABSENT  # as file_digest: unreadable
    return digest.hexdigest()


def _usage(st: os.stat_result) -> int:
    """Bytes on disk (whole blocks) where the platform says, else the file's size."""
    blocks = getattr(st, "st_blocks", None)
    return blocks * 512 if blocks else st.st_size


def write_atomically(directory_fd: int, name: str, data: bytes) -> None:
    """Write `name` in the directory open as `directory_fd`: a new temporary file (`name.<pid>.tmp`,
    created exclusively: never one that is there already, nor through a link), then renamed over
    `name` (which replaces a link there, never what it points to). Raises OSError."""
    tmp = f"{name}.{os.getpid()}.tmp"
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0), 0o666, dir_fd=directory_fd)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
        os.replace(tmp, name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=directory_fd)  # the file just created, by this process
        raise
