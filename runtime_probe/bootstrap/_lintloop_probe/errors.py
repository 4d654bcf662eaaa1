"""Exceptions and warnings: `error` events for uncaught exceptions (main thread, other
threads, `multiprocessing` processes) and for exceptions the framework hooks see pass
by, and `warning` events.

The previous hooks still run, so the user sees what they would without the probe: the
traceback printed for an uncaught exception leaves out the probe's own frames.
"""
import sys
import threading
import types
import warnings

from .events import emit, first_line, probe_error, safe_str
from .frames import is_probe_file, stack_user_frames, tb_user_frames, user_location, user_site
from .state import S


def record_exception(exc, where, tb=None, from_stack=False, extra=None):
    """Emit an `error` event for `exc` (once per exception object and `where`)."""
    try:
        key = (id(exc), where)
        seen = getattr(exc, "_lintloop_recorded", None)
        if seen is not None and where in seen:
            return
        try:
            if seen is None:
                seen = set()
                exc._lintloop_recorded = seen
            seen.add(where)
        except Exception:
            if key in S.once:
                return
            S.once.add(key)
        frames = tb_user_frames(tb if tb is not None else exc.__traceback__)
        if from_stack:  # caught in a wrapper: the user frames are above us
            frames = stack_user_frames(1) + frames
        file, line = (frames[-1][0], frames[-1][1]) if frames else (None, None)
        ev = {"type": "error", "where": where, "exc_type": type(exc).__name__,
              "exc_module": type(exc).__module__, "message": _exc_message(exc),
              "file": file, "line": line, "frames": frames, "exc_id": id(exc)}
        cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if cause is not None:
            ev["cause"] = {"exc_type": type(cause).__name__, "message": first_line(cause)}
        embedded = _embedded_traceback(safe_str(exc))
        if embedded:
            ev["embedded"] = embedded
        if extra:
            ev.update(extra)
        emit(ev)
    except Exception as err:
        probe_error("record_exception", err)


def _exc_message(exc):
    """First line of the message; for TF's "in user code:" errors, the original message."""
    text = safe_str(exc)
    first = first_line(text)
    if first == "in user code:":
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        for line in reversed(lines):
            if not line.startswith("File ") and not line.endswith("*"):
                prefix = type(exc).__name__ + ": "
                return (line[len(prefix):] if line.startswith(prefix) else line)[:500]
    return first


def _embedded_traceback(text):
    """A traceback quoted in a message (e.g. torch's ProcessRaisedException from a worker):
    its exception line and innermost user frame."""
    marker = "Traceback (most recent call last):"
    if marker not in text:
        return None
    body = text[text.rindex(marker):]
    lines = [line for line in body.splitlines() if line.strip()]
    exc_line = lines[-1].strip() if lines else ""
    file = line_no = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith('File "') and '", line ' in stripped:
            try:
                path = stripped[6:stripped.index('", line ')]
                num = int(stripped.split('", line ', 1)[1].split(",", 1)[0])
            except (ValueError, IndexError):
                continue
            loc = user_location(path, num)
            if loc is not None:
                file, line_no = loc
    return {"exception": exc_line[:500], "file": file, "line": line_no}


def _strip_probe_frames(tb):
    """The traceback without the probe's frames (the user sees what they would without us)."""
    try:
        entries = []
        while tb is not None:
            if not is_probe_file(tb.tb_frame.f_code.co_filename):
                entries.append(tb)
            tb = tb.tb_next
        new = None
        for entry in reversed(entries):
            new = types.TracebackType(new, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        return new
    except Exception:
        return tb


def _excepthook(exc_type, exc, tb):
    if exc is not None and not issubclass(exc_type, SystemExit):
        S.uncaught = True
        record_exception(exc, "uncaught", tb)
        tb = _strip_probe_frames(tb)
        try:
            exc.__traceback__ = tb
        except Exception:
            pass
    return _PREV_EXCEPTHOOK(exc_type, exc, tb)


def _threading_excepthook(args):
    if args.exc_value is not None and not issubclass(args.exc_type, SystemExit):
        name = getattr(args.thread, "name", None)
        record_exception(args.exc_value, "thread", args.exc_traceback, extra={"thread": name})
    return _PREV_THREADING_EXCEPTHOOK(args)


def _showwarning(message, category, filename, lineno, file=None, line=None):
    try:
        fpath, fline = user_site(2)
        origin = user_location(filename, lineno) if filename else None
        if origin is not None:  # warned in user code itself (e.g. stacklevel pointed here)
            fpath, fline = origin
        emit({"type": "warning", "category": getattr(category, "__name__", str(category)),
              "message": first_line(safe_str(message)), "file": fpath, "line": fline,
              "origin_file": filename, "origin_line": lineno})
    except Exception as err:
        probe_error("showwarning", err)
    return _PREV_SHOWWARNING(message, category, filename, lineno, file, line)


def install():
    """Put our hooks in front of sys.excepthook, threading.excepthook and
    warnings.showwarning (each calls the one it replaced)."""
    global _PREV_EXCEPTHOOK, _PREV_THREADING_EXCEPTHOOK, _PREV_SHOWWARNING
    _PREV_EXCEPTHOOK = sys.excepthook
    sys.excepthook = _excepthook
    _PREV_THREADING_EXCEPTHOOK = threading.excepthook
    threading.excepthook = _threading_excepthook
    _PREV_SHOWWARNING = warnings.showwarning
    warnings.showwarning = _showwarning


def install_process_hook(mp_process):
    """`multiprocessing.process`: record the exception that ends a Process's run()."""
    cls = mp_process.BaseProcess
    original_run = cls.run

    def run(self):
        try:
            return original_run(self)
        except Exception as exc:
            record_exception(exc, "process", extra={"process": getattr(self, "name", None)})
            raise

    run.__wrapped__ = original_run
    cls.run = run
