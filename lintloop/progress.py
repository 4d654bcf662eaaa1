"""A progress bar on stderr for long runs: `Linting ━━━━ 1234/6986 files · 5 findings · 0:00:07`.

Shown only on an interactive terminal (never into a pipe or file, never with `--quiet`), and only
once a run has lasted `delay` seconds, so short runs print nothing. It is transient: it is erased
when the run ends, before the report is written. It is fed by `run_jobs`' `on_result` callback,
in the parent process; rich redraws it on its own thread a few times a second.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from lintloop import terminal

if TYPE_CHECKING:  # rich is imported once a bar is shown: a run that shows none never loads it
    from rich.console import Console
    from rich.progress import Progress

DEFAULT_DELAY_S = 1.0


class ProgressBar:
    """Callable with each finished job's result; `close()` when the run ends."""

    def __init__(self, total: int, console: Console, delay: float = DEFAULT_DELAY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.console = console
        self.delay = delay
        self.clock = clock
        self.started_at = clock()
        self.done = 0
        self.findings = 0
        self._progress: Progress | None = None
        self._task: Any = None

    def __call__(self, result: Any) -> None:
        self.done += 1
        self.findings += len(result.findings)
        if self._progress is None:
            if self.clock() - self.started_at < self.delay or self.done >= self.total:
                return
            self._start()
        assert self._progress is not None
        self._progress.update(self._task, completed=self.done, findings=self._findings_text())

    def _findings_text(self) -> str:
        return f"{self.findings} finding{'' if self.findings == 1 else 's'}"

    def _start(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("Linting"), BarColumn(), MofNCompleteColumn(), TextColumn("files · {task.fields[findings]} ·"),
            TimeElapsedColumn(), console=self.console, transient=True, redirect_stdout=False, redirect_stderr=False,
            refresh_per_second=5)  # enough for a seconds clock; each redraw takes CPU from the workers
        # The elapsed time counts from the start of the run, not from when the bar appears.
        self._task = self._progress.add_task("lint", total=self.total, completed=self.done, findings=self._findings_text())
        self._progress.tasks[0].start_time = self._progress.get_time() - (self.clock() - self.started_at)
        self._progress.start()

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def progress_bar(total: int, *, quiet: bool, stream: IO[str] | None = None,
                 delay: float | None = None) -> ProgressBar | None:
    """A bar for a run of `total` files, or None where none belongs: `--quiet`, or stderr not an
    interactive terminal (rich's FORCE_COLOR / TTY_COMPATIBLE do not count: CI logs get no bar)."""
    stream = sys.stderr if stream is None else stream
    if quiet or total == 0:
        return None
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return None
    from rich.console import Console

    console = Console(file=stream, no_color=not terminal.color_enabled(stream))
    if not console.is_interactive:  # TERM=dumb
        return None
    return ProgressBar(total, console, DEFAULT_DELAY_S if delay is None else delay)
