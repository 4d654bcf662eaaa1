"""The verdicts of the last `check --probe` of each file, kept for the editor.

`check --probe` records, per probed file, the verdict of each of its findings under
`.lintloop_cache/probe/` of the project; the language server shows a recorded verdict on the
matching diagnostic for as long as the file's text is the text that was probed (a later edit
makes the record stale: it is then ignored, never shown against moved lines). Records are JSON, read
within bounds of size, depth and values and type-checked (a verdict is kept only where its one-line
description can be made of it); an unreadable, foreign or malformed record is ignored, whoever planted
it in the working tree. The store is opened as the result cache is (`lintloop.cache.cache_directory`):
never through a symbolic link, nor in another user's cache directory; there the run goes on without it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from lintloop import bounded_json
from lintloop.cache import cache_directory, read_regular, subdirectory, write_atomically
from lintloop.finding import Finding
from lintloop.runtime_probe.verdicts import describe

STORE_DIR_NAME = "probe"
FORMAT = 1
MAX_RECORD_BYTES = 4 * 1024 * 1024
# A record holds a file's verdicts, a few dozen values each: a hundred thousand is far more than any file's.
MAX_RECORD_VALUES = 100_000
_STATUSES = ("confirmed", "not-confirmed", "error", "skipped")

VerdictKey = tuple[str, int, int]  # (code, line, column) of the finding


def _record_name(path: Path) -> str:
    return f"{hashlib.sha256(str(path.resolve()).encode()).hexdigest()}.json"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def record(cache_dir: Path, path: Path, text: str, findings: list[Finding]) -> bool:
    """Keep the probe verdicts of `findings` (all of one file, whose text is `text`). False if the
    store cannot be written (the run goes on without it)."""
    verdicts = [{"code": f.code, "line": f.line, "column": f.column, "probe": f.probe}
                for f in findings if f.probe is not None]
    entry = {"format": FORMAT, "path": str(path.resolve()), "digest": _digest(text), "verdicts": verdicts}
    with cache_directory(cache_dir, create=True) as cache_fd:
        if cache_fd is None:
            return False
        with subdirectory(cache_fd, STORE_DIR_NAME, create=True) as store_fd:
            if store_fd is None:
                return False
            try:
                write_atomically(store_fd, _record_name(path), json.dumps(entry).encode("utf-8"))
            except OSError:
                return False
    return True


def recorded(cache_dir: Path, path: Path, text: str) -> dict[VerdictKey, dict[str, Any]]:
    """The recorded verdicts for `path`, if it was probed with exactly this `text`; else none."""
    raw = _read_record(cache_dir, _record_name(path))
    try:
        entry = bounded_json.loads(raw.decode("utf-8"), max_values=MAX_RECORD_VALUES) if raw is not None else None
    except ValueError:  # not UTF-8, not JSON, beyond the bounds
        return {}
    if (not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("path") != str(path.resolve())
            or entry.get("digest") != _digest(text) or not isinstance(entry.get("verdicts"), list)):
        return {}
    verdicts: dict[VerdictKey, dict[str, Any]] = {}
    for item in entry["verdicts"]:
        if _valid(item):
            verdicts[(item["code"], item["line"], item["column"])] = item["probe"]
    return verdicts


def _read_record(cache_dir: Path, name: str) -> bytes | None:
    with cache_directory(cache_dir) as cache_fd:
        if cache_fd is None:
            return None
        with subdirectory(cache_fd, STORE_DIR_NAME) as store_fd:
            return None if store_fd is None else read_regular(store_fd, name, MAX_RECORD_BYTES)


def _valid(item: Any) -> bool:
    if not isinstance(item, dict) or not isinstance(item.get("code"), str):
        return False
    if not all(isinstance(item.get(k), int) and not isinstance(item.get(k), bool) for k in ("line", "column")):
        return False
    probe = item.get("probe")
    if not (isinstance(probe, dict) and probe.get("status") in _STATUSES
            and isinstance(probe.get("evidence", {}), dict)):
        return False
    try:
        describe(probe)  # what the editor is shown of it
    except (LookupError, TypeError, ValueError, AttributeError):  # evidence of a shape no probe writes
        return False
    return True
