"""The `lintloop` console script and `python -m lintloop`: Ctrl-C ends the run with exit 130 and no
traceback, even while the engine is still being imported (a third of a second at start-up)."""

from __future__ import annotations

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program ended by Ctrl-C


def main() -> int:
    try:
        from lintloop.cli import main as run
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return run()
