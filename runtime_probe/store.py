"""The verdicts of the last `check --probe` of each file, kept for the editor.

`check --probe` records, per probed file, the verdict of each of its findings under
`.lintloop_cache/probe/` of the project; the language server shows a recorded verdict on the
matching diagnostic for as long as the file's text is the text that was probed (a later edit
makes the record stale: it is then ignored, never shown against moved lines). Records are JSON,
type-checked on read; an unreadable, foreign or malformed record is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from lintloop.finding import Finding

STORE_DIR_NAME = "probe"
FORMAT = 1
MAX_RECORD_BYTES = 4 * 1024 * 1024
_STATUSES = ("confirmed", "not-confirmed", "error", "skipped")

VerdictKey = tuple[str, int, int]  # (code, line, column) of the finding


def _record_path(cache_dir: Path, path: Path) -> Path:
    name = hashlib.sha256(str(path.resolve()).encode()).hexdigest()
    return cache_dir / STORE_DIR_NAME / f"{name}.json"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def record(cache_dir: Path, path: Path, text: str, findings: list[Finding]) -> bool:
    """Keep the probe verdicts of `findings` (all of one file, whose text is `text`). False if the
    store cannot be written (the run goes on without it)."""
    verdicts = [{"code": f.code, "line": f.line, "column": f.column, "probe": f.probe}
                for f in findings if f.probe is not None]
    entry = {"format": FORMAT, "path": str(path.resolve()), "digest": _digest(text), "verdicts": verdicts}
    target = _record_path(cache_dir, path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as stream:
                json.dump(entry, stream)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError:
        return False
    return True


def recorded(cache_dir: Path, path: Path, text: str) -> dict[VerdictKey, dict[str, Any]]:
    """The recorded verdicts for `path`, if it was probed with exactly this `text`; else none."""
    target = _record_path(cache_dir, path)
    try:
        with open(target, "rb") as stream:
            raw = stream.read(MAX_RECORD_BYTES + 1)
        if len(raw) > MAX_RECORD_BYTES:
            return {}
        entry = json.loads(raw)
    except (OSError, ValueError):
        return {}
    if (not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("path") != str(path.resolve())
            or entry.get("digest") != _digest(text) or not isinstance(entry.get("verdicts"), list)):
        return {}
    verdicts: dict[VerdictKey, dict[str, Any]] = {}
    for item in entry["verdicts"]:
        if _valid(item):
            verdicts[(item["code"], item["line"], item["column"])] = item["probe"]
    return verdicts


def _valid(item: Any) -> bool:
    if not isinstance(item, dict) or not isinstance(item.get("code"), str):
        return False
    if not all(isinstance(item.get(k), int) and not isinstance(item.get(k), bool) for k in ("line", "column")):
        return False
    probe = item.get("probe")
    return (isinstance(probe, dict) and probe.get("status") in _STATUSES
            and isinstance(probe.get("evidence", {}), dict))
