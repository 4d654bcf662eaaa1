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
