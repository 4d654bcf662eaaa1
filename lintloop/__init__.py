"""lintloop: a static analyzer for deep-learning training loops."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

# `python -m lintloop` (while the package is being found, sys.argv[0] is "-m"): Python put the working
# directory first on the module path, so a linted tree's `rich.py` or `signal.py` would be imported, and
# run, in place of the real module. Taken off before anything else is imported (the console script,
# which editors and pre-commit run, never has it). Only the standard library's `os` and `sys`, loaded at
# every start, come before.
if _sys.argv[:1] == ["-m"] and _sys.path and _sys.path[0] in ("", _os.getcwd()):
    del _sys.path[0]

# Installed, `rules/` and `runtime_probe/` are subpackages of `lintloop`. In a source
# checkout they sit beside this directory; let `lintloop.rules` resolve there too, so that
# `python -m lintloop` from the repository root uses the same code as the installed tool.
_here = _os.path.dirname(_os.path.realpath(__file__))
_checkout_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "rules")) and _os.path.isfile(
        _os.path.join(_checkout_root, "rules", "__init__.py")):
    __path__.append(_checkout_root)  # type: ignore[name-defined]
