"""Writing events: one JSON line per event, appended to the configured file.

Each event goes out at once, with one write(2) (atomic between processes and threads appending
to the same file): a program killed -- at the timeout, over the memory limit, by itself -- has
written every event up to that moment.  (Batching saved nothing measurable: ~13-17 us per event
either way, the time goes into finding the user's frame and into json.)  A failure inside the
probe itself becomes a `probe_error` event, once per place.
"""
import json
import os
import sys
import time

from .frames import user_site
from .state import S


def _json_default(obj):
    try:
        return float(obj)
    except Exception:
        return str(obj)


def emit(ev, site=True):
    """Append one event.  Without a `file`, it gets the innermost user frame's location
    (`site`)."""
    pid = os.getpid()
    if pid != S.pid:           # a forked child: announce it once
        S.pid = pid
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
    data = line.encode("utf-8", "replace")
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
