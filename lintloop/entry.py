"""The `lintloop` console script and `python -m lintloop`: Ctrl-C ends the run with exit 130 and no
traceback, also while the engine is still being imported (a third of a second at start-up)."""

from __future__ import annotations

import os
import signal

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program ended by Ctrl-C


def _interrupted_while_starting(signum: int, frame: object) -> None:
    # Nothing is printed or written yet: end at once. (Raising KeyboardInterrupt here could surface
    # outside any handler: Python checks for signals on entering a function, before its `try`.)
    os._exit(EXIT_INTERRUPTED)


def main() -> int:
    from lintloop.cli import main as run

    # From here on Ctrl-C raises KeyboardInterrupt, which the command handles (workers stopped, exit 130).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return run()


signal.signal(signal.SIGINT, _interrupted_while_starting)
