"""Where lintloop's time goes: exclusive seconds per stage, analysis and rule (for `lintloop.profiling`)."""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from time import perf_counter
from typing import Iterator


class StageTimer:
    """Accumulates exclusive time: a stage entered inside another is not counted twice."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._open: list[float] = []  # time spent in children of each open stage

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = perf_counter()
        self._open.append(0.0)
        try:
            yield
        finally:
            elapsed = perf_counter() - start
            in_children = self._open.pop()
            self.totals[name] += elapsed - in_children
            if self._open:
                self._open[-1] += elapsed


class _NoTimer:
    """Stands in when nobody profiles: entering a stage costs one call."""

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        yield


NO_TIMER = _NoTimer()
