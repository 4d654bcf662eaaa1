"""Writing events: one JSON line per event, appended to the configured file.

Lines go out with one write(2) per batch (atomic between processes appending to the same
file).  A failure inside the probe itself becomes a `probe_error` event, once per place.
"""
import json
import os
import sys
import time

from .frames import user_site
from .state import S

_FLUSH_LINES = 64
_FLUSH_S = 0.5


def _json_default(obj):
    try:
        return float(obj)
    except Exception:
        return str(obj)


def emit(ev, site=True, buffered=False):
    """Append one event.  Without a `file`, it gets the innermost user frame's location
    (`site`).  `buffered` events (steps) are held back until 64 lines or 0.5 s have
    gathered, or any other event is emitted; a kill loses at most that tail."""
    pid = os.getpid()
    if pid != S.pid:           # a forked child: announce it once; the buffer is the parent's
        S.pid = pid
        S.buf = []
        emit({"type": "start", "forked": True, "ppid": os.getppid(), "argv": list(sys.argv)},
             site=False)
    now = time.perf_counter()
    ev["pid"] = pid
    ev["t"] = round(now - S.t0, 6)
    if site and "file" not in ev:
        ev["file"], ev["line"] = user_site(2)
    try:
        line = json.dumps(ev, default=_json_default, separators=(",", ":")) + "\n"
    except Exception:
        return
    S.buf.append(line)
    if not buffered or len(S.buf) >= _FLUSH_LINES or now - S.flushed > _FLUSH_S:
        flush(now)


def flush(now=None):
    if not S.buf:
        return
    buf, S.buf = S.buf, []
    data = "".join(buf).encode("utf-8", "replace")
    S.flushed = time.perf_counter() if now is None else now
    try:
        while data:
            written = os.write(S.fd, data)
            data = data[written:]
    except Exception:
        pass


def probe_error(where, exc):
    if where in S.probe_errors:
        return
    S.probe_errors.add(where)
    emit({"type": "probe_error", "where": where, "exc_type": type(exc).__name__,
          "message": first_line(exc)}, site=False)


def first_line(exc_or_text, limit=500):
    text = exc_or_text if isinstance(exc_or_text, str) else safe_str(exc_or_text)
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def safe_str(obj):
    try:
        return str(obj)
    except Exception:
        return f"<unprintable {type(obj).__name__}>"
