"""The per-file result cache of `lintloop check` (`.lintloop_cache/` under the project root).

One JSON file per (file content, lintloop version, Python implementation, libcst version, the
engine's source files (size and mtime: an edited rule in a source checkout invalidates the cache),
rule selection, per-rule options, display path, mode): everything in the file that can change its findings.
A finding may also depend on other modules of the linted project (a helper imported from
`losses.py`): the entry records each module consulted with its content digest, and is a miss
when one of them changed, appeared or disappeared. Entries
are JSON only — never pickle, never `eval` — and each is checked before use:

* it stores its own key, which must match the key it was looked up by;
* it stores a sha256 digest of the canonical JSON of its findings, recomputed on every read;
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
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from lintloop import __version__
from lintloop.analysis.project import ABSENT
from lintloop.finding import Edit, Finding, Fix

CACHE_DIR_NAME = ".lintloop_cache"
FORMAT = 3  # bump when the entry layout changes
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
_ENTRY_KEYS = {"format", "key", "sha256", "findings", "depends"}
_FINDING_KEYS = {"path", *_INT_FIELDS, *_STR_FIELDS, "fix", "probe", "suppression_lines", "cell"}
_FIX_KEYS = {"applicability", "edits", "description"}
_EDIT_KEYS = {*_INT_FIELDS, "content", "cell"}


@functools.lru_cache(maxsize=1)
def _environment() -> str:
    """What besides the inputs decides the findings: lintloop, the host Python (its parser's
    verdicts and messages) and libcst."""
    try:
        from libcst._version import __version__ as libcst  # written by setuptools-scm; ~50x faster than
    except ImportError:  # importlib.metadata, which costs each worker ~50 ms
        try:
            from importlib.metadata import version

            libcst = version("libcst")
        except Exception:  # noqa: BLE001 - an unusual install: the other parts still key the entry
            libcst = "?"
    return f"{__version__};{sys.implementation.cache_tag};{libcst};{_engine_fingerprint()}"


def _engine_fingerprint() -> str:
    """sha256 of the name, size and mtime of every source file of the engine and its rules (~1 ms):
    the version alone does not change when a rule is edited in a source checkout."""
    import lintloop
    import lintloop.rules

    digest = hashlib.sha256()
    for base in sorted({Path(lintloop.__file__).parent, Path(lintloop.rules.__file__).parent}):
        for root, subdirs, files in os.walk(base):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    try:
                        st = os.stat(os.path.join(root, name))
                    except OSError:
                        continue
                    relative = os.path.relpath(os.path.join(root, name), base)
                    digest.update(f"{relative}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()


class ResultCache:
    """Findings per file, on disk. Cheap to construct (no I/O): each worker makes its own."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes

    @classmethod
    def open(cls, root: Path, max_bytes: int | None = None) -> ResultCache | None:
        """The cache under `root`, created (with `CACHEDIR.TAG` and a `.gitignore`) if need be;
        None where it cannot be written."""
        directory = root / CACHE_DIR_NAME
        try:
            directory.mkdir(exist_ok=True)
            for name, text in (("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", "# created by lintloop\n*\n")):
                if not (directory / name).is_file():
                    _write_atomically(directory / name, text.encode())
            if not os.access(directory, os.W_OK):
                return None
        except OSError:
            return None
        _environment()  # once, here: forked workers inherit it
        return cls(directory, DEFAULT_MAX_BYTES if max_bytes is None else max_bytes)

    # -- entries --------------------------------------------------------------------------------

    @staticmethod
    def key(display: str, codes: tuple[str, ...] | list[str], options: str, data: bytes, mode: str = "check") -> str:
        header = json.dumps([FORMAT, _environment(), mode, display, sorted(codes), options])
        return hashlib.sha256(header.encode() + b"\0" + data).hexdigest()

    def entry_path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str, display: str) -> list[Finding] | None:
        """The cached findings, or None for a miss (absent, unreadable or invalid entry)."""
        entry = self.entry_path(key)
        opened = _open_regular(entry, MAX_ENTRY_BYTES)
        if opened is None:
            return None
        stream, st = opened
        try:
            with stream:
                raw = stream.read(MAX_ENTRY_BYTES + 1)
        except OSError:
            return None
        mtime = st.st_mtime
        findings = decode_entry(raw, key, display)
        if findings is not None and time.time() - mtime > TOUCH_AFTER_S:
            try:
                os.utime(entry)
            except OSError:
                pass  # pruned meanwhile, or read-only: the entry is still good
        return findings

    def put(self, key: str, findings: list[Finding], dependencies: dict[str, str] | None = None) -> bool:
        """Store the findings, and the other files they depend on (path -> content digest, "" for a
        file that was looked for and is absent); False where they could not be written (the run goes
        on uncached)."""
        entry = self.entry_path(key)
        try:
            entry.parent.mkdir(exist_ok=True)
            _write_atomically(entry, encode_entry(key, findings, dependencies or {}))
        except OSError:
            return False
        return True

    # -- size bound -----------------------------------------------------------------------------

    def entries(self) -> list[tuple[float, int, Path]]:
        """(mtime, bytes on disk, path) of every entry; vanished files are skipped."""
        found = []
        try:
            shards = [d for d in os.scandir(self.directory) if len(d.name) == 2 and d.is_dir(follow_symlinks=False)]
        except OSError:
            return []
        for shard in shards:
            try:
                with os.scandir(shard.path) as it:
                    for item in it:
                        try:
                            st = item.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        found.append((st.st_mtime, _usage(st), Path(item.path)))
            except OSError:
                continue
        return found

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def prune(self) -> int:
        """Remove the least recently used entries while the cache exceeds its bound, down to
        `LOW_WATER` of it; also stale temporary files. Safe against concurrent runs. Returns the
        number of files removed."""
        now = time.time()
        removed = 0
        entries = []
        for mtime, size, path in self.entries():
            if path.suffix == ".tmp" and now - mtime > STALE_TMP_S:
                removed += _unlink(path)
            else:
                entries.append((mtime, size, path))
        total = sum(size for _, size, _ in entries)
        if total <= self.max_bytes:
            return removed
        target = int(self.max_bytes * LOW_WATER)
        for _, size, path in sorted(entries, key=lambda e: e[0]):
            if total <= target:
                break
            removed += _unlink(path)
            total -= size  # gone, by us or by a concurrent run
        return removed


# -- entry format -------------------------------------------------------------------------------

def _canonical(findings: list[dict[str, Any]], depends: list[list[str]] | None = None) -> bytes:
    """What the digest covers: the findings, and the files they depend on (where there are any)."""
    covered: Any = [findings, depends] if depends else findings
    return json.dumps(covered, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def finding_to_json(finding: Finding) -> dict[str, Any]:
    """The JSON output's fields, and what it leaves out: the fix description and suppression lines."""
    data = finding.to_json()
    if finding.fix is not None:
        data["fix"]["description"] = finding.fix.description
    data["suppression_lines"] = list(finding.suppression_lines)
    return data


def encode_entry(key: str, findings: list[Finding], dependencies: dict[str, str] | None = None) -> bytes:
    payload = [finding_to_json(f) for f in findings]
    depends = sorted([path, digest] for path, digest in (dependencies or {}).items())
    digest = hashlib.sha256(_canonical(payload, depends)).hexdigest()
    return json.dumps({"format": FORMAT, "key": key, "sha256": digest, "findings": payload, "depends": depends},
                      separators=(",", ":")).encode("ascii")


def decode_entry(raw: bytes, key: str, display: str) -> list[Finding] | None:
    """The findings of a valid entry for `key`, or None: any defect is a miss, never an error."""
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError):  # corrupt, truncated, not UTF-8 (a pickle, say), absurdly nested
        return None
    if not isinstance(entry, dict) or entry.keys() != _ENTRY_KEYS or entry.get("format") != FORMAT \
            or entry.get("key") != key:
        return None
    payload, depends = entry.get("findings"), entry.get("depends")
    if not isinstance(payload, list) or not isinstance(entry.get("sha256"), str):
        return None
    if not isinstance(depends, list) or not all(
            isinstance(d, list) and len(d) == 2 and all(isinstance(part, str) for part in d) for d in depends):
        return None
    try:
        if hashlib.sha256(_canonical(payload, depends)).hexdigest() != entry["sha256"]:
            return None
    except (ValueError, RecursionError):
        return None
    if any(_dependency_digest(path) != digest for path, digest in depends):
        return None  # a module the findings depend on changed
    findings = []
    for item in payload:
        finding = _finding_from_json(item, display)
        if finding is None:
            return None
        findings.append(finding)
    return findings


def _is_int(value: object) -> bool:
    return type(value) is int  # not bool


def _finding_from_json(data: object, display: str) -> Finding | None:
    if not isinstance(data, dict) or data.get("path") != display or not _FINDING_KEYS >= data.keys():
        return None
    if not all(_is_int(data.get(k)) for k in _INT_FIELDS) or not all(isinstance(data.get(k), str) for k in _STR_FIELDS):
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
    return Finding(display, *(data[k] for k in _INT_FIELDS), *(data[k] for k in _STR_FIELDS),
                   fix=fix, probe=probe, suppression_lines=tuple(lines), cell=data.get("cell"))


def _is_cell(value: object) -> bool:
    return value is None or _is_int(value)


# -- file system helpers ------------------------------------------------------------------------

def _open_regular(path: str | os.PathLike[str], max_bytes: int | None = None,
                  follow_symlinks: bool = False) -> tuple[BinaryIO, os.stat_result] | None:
    """`path` open for reading and its status, or None unless it is a regular file (of at most
    `max_bytes`). Opened without blocking: a FIFO planted in the cache would otherwise block the run
    until something writes to it; a symlink to /dev/zero is a device, never read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)  # entries are written as regular files, never links
    try:
        descriptor = os.open(path, flags)
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


def _dependency_digest(path: str) -> str:
    """What `file_digest(path)` gives for what a real entry depends on: a module file's sha256, or
    `ABSENT` for a path looked for and not there (or a directory). Anything else that a hostile entry
    might name (a FIFO, a device) matches no recorded digest, and is never read."""
    opened = _open_regular(path, follow_symlinks=True)
    if opened is None:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return ABSENT
        # A directory or an unreadable file: what file_digest cannot open; a FIFO or device: no match.
        return ABSENT if stat.S_ISDIR(mode) or stat.S_ISREG(mode) else "not a regular file"
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


def _unlink(path: Path) -> int:
    try:
        path.unlink()
    except OSError:  # FileNotFoundError: a concurrent run pruned it first
        return 0
    return 1


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as stream:
            stream.write(data)
        os.replace(tmp, path)
    except OSError:
        _unlink(tmp)
        raise
