"""Which code is the user's, and where on the stack it is.

A file is the user's unless it lies in site-packages / dist-packages, the standard library,
a framework's directory (`add_nonuser_dir`) or the probe's own directory.  Code that
TensorFlow's autograph generated is mapped back to the source line it came from
(`add_autograph_line`).  Locations are absolute paths, relative ones taken from the
start-up working directory.
"""
import os
import sys

from .state import S

# The bootstrap directory: this package and the sitecustomize that loads it.
PROBE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

_FILE_KIND = {}     # co_filename -> True (user) / False (not user) / None (autograph file)
_UNKNOWN = object()
_AG_MAP = {}        # (generated file, line) -> (original file, line)
_NONUSER_PREFIXES = []
_ABS = {}


def add_nonuser_dir(module):
    """Treat the directory of `module` (a framework, the standard library) as not the user's."""
    path = getattr(module, "__file__", None)
    if path:
        d = os.path.dirname(os.path.abspath(path)) + os.sep
        if d not in _NONUSER_PREFIXES:
            _NONUSER_PREFIXES.append(d)
            _FILE_KIND.clear()


def add_autograph_line(generated, original):
    """Map (file, line) of autograph-generated code to (file, line) of its source."""
    _AG_MAP[generated] = original


def is_probe_file(filename):
    return os.path.abspath(filename).startswith(PROBE_DIR)


def _classify(filename):
    kind = _FILE_KIND.get(filename, _UNKNOWN)
    if kind is not _UNKNOWN:
        return kind
    if "__autograph_generated_file" in filename:
        kind = None
    elif filename.startswith("<"):
        kind = False
    else:
        path = filename if os.path.isabs(filename) else os.path.join(S.cwd0, filename)
        path = os.path.normpath(path)
        if (path.startswith(PROBE_DIR) or os.sep + "site-packages" + os.sep in path
                or os.sep + "dist-packages" + os.sep in path):
            kind = False
        else:
            kind = not any(path.startswith(p) for p in _NONUSER_PREFIXES)
    _FILE_KIND[filename] = kind
    return kind


def user_location(filename, lineno):
    """(file, line) of a user location, mapping autograph-generated code back; else None."""
    kind = _classify(filename)
    if kind is True:
        return _abs(filename), lineno
    if kind is None:
        orig = _AG_MAP.get((filename, lineno))
        if orig is not None and _classify(orig[0]) is True:
            return _abs(orig[0]), orig[1]
    return None


def _abs(filename):
    path = _ABS.get(filename)
    if path is None:
        path = filename if os.path.isabs(filename) else os.path.join(S.cwd0, filename)
        path = _ABS[filename] = os.path.normpath(path)
    return path


def user_site(depth=1):
    """(file, line) of the innermost user frame on the current stack (or (None, None))."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return None, None
    while f is not None:
        code = f.f_code
        kind = _FILE_KIND.get(code.co_filename, _UNKNOWN)
        if kind is True:
            return _abs(code.co_filename), f.f_lineno
        if kind is not False:  # unknown yet, or autograph-generated
            loc = user_location(code.co_filename, f.f_lineno)
            if loc is not None:
                return loc
        f = f.f_back
    return None, None


def stack_user_frames(depth=1, limit=20):
    """[file, line, function] of the user frames on the current stack, outermost first."""
    out = []
    try:
        f = sys._getframe(depth)
    except ValueError:
        return out
    while f is not None and len(out) < limit:
        loc = user_location(f.f_code.co_filename, f.f_lineno)
        if loc is not None:
            out.append([loc[0], loc[1], f.f_code.co_name])
        f = f.f_back
    out.reverse()
    return out


def tb_user_frames(tb, limit=30):
    """[file, line, function] of the user frames of a traceback, outermost first."""
    out = []
    while tb is not None:
        code = tb.tb_frame.f_code
        loc = user_location(code.co_filename, tb.tb_lineno)
        if loc is not None:
            out.append([loc[0], loc[1], code.co_name])
        tb = tb.tb_next
    return out[-limit:]
