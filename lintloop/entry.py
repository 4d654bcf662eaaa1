"""The `lintloop` console script and `python -m lintloop`: Ctrl-C ends the run with exit 130 and no
traceback, also while the engine is still being imported (a third of a second at start-up)."""

from __future__ import annotations

import os
import signal
import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program ended by Ctrl-C


def _interrupted_while_starting(signum: int, frame: object) -> None:
    # Nothing is printed or written yet: end at once. (Raising KeyboardInterrupt here could surface
    # outside any handler: Python checks for signals on entering a function, before its `try`.)
    os._exit(EXIT_INTERRUPTED)


def main() -> int:
    if sys.argv[1:] == ["--version"]:  # what an editor or a script asks first: answered without the CLI's imports
        from lintloop import __version__

        print(f"lintloop {__version__}")
        return 0
    if sys.argv[1:2] == ["check"]:
        from lintloop import warm_engine

        if warm_engine.enabled():
            status = warm_engine.run_check(sys.argv[1:])
            if status is not None:
                return status
    try:
        from lintloop.cli import main as run
    except ModuleNotFoundError as exc:
        missing = ".".join((exc.name or "").split(".")[:2])
        if missing not in ("lintloop.rules", "lintloop.runtime_probe"):
            raise
        # setup.py maps rules/ and runtime_probe/ into lintloop: a checkout's lintloop/ folder, imported
        # from the working directory (`python -m lintloop` in its root) in place of the install, has none.
        print(f"lintloop: {os.path.dirname(__file__)} is a source checkout's lintloop/ folder, imported in "
              "place of the installed package (`python -m` looks in the working directory first), and "
              f"{missing} is not in it: run lintloop from another folder, or install this checkout "
              "editable (`pip install -e .`)", file=sys.stderr)
        return 2

    # From here on Ctrl-C raises KeyboardInterrupt, which the command handles (workers stopped, exit 130).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return run()


signal.signal(signal.SIGINT, _interrupted_while_starting)
