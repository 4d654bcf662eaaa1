"""Linting off the event loop: one pending run per document, debounced; a newer request cancels the
older one, and a result for a document version that is no longer current is dropped, never delivered."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from lintloop.server.documents import DocumentLint, Snapshot

# A change is linted once typing pauses this long: a burst of keystrokes costs one lint, not one each.
CHANGE_DELAY_S = 0.25


class LintScheduler:
    def __init__(self, lint: Callable[[Snapshot], Awaitable[DocumentLint]],
                 current: Callable[[str], Snapshot | None], deliver: Callable[[DocumentLint], None],
                 fail: Callable[[Snapshot, Exception], None]) -> None:
        """`lint` lints a snapshot off the event loop (cancelling it drops a run that has not started);
        `current` gives a document's snapshot now (None once closed); `deliver` and `fail` run on the
        event loop, for current snapshots only."""
        self._lint = lint
        self._current = current
        self._deliver = deliver
        self._fail = fail
        self._pending: dict[str, asyncio.Task[None]] = {}

    def request(self, uri: str, delay: float = 0.0) -> None:
        """Lint the document `uri` after `delay` seconds, in whatever version it has then."""
        self.cancel(uri)
        task = asyncio.get_running_loop().create_task(self._run(uri, delay))
        self._pending[uri] = task
        task.add_done_callback(lambda done: self._forget(uri, done))

    def cancel(self, uri: str) -> None:
        task = self._pending.pop(uri, None)
        if task is not None:
            # A run not started yet is dropped; one already running in the worker finishes (within its
            # limits) and its result is dropped. It is not killed: a killed worker takes its warm caches
            # with it, and typing would kill run after run of a file slower to lint than a keystroke.
            task.cancel()

    def _forget(self, uri: str, task: asyncio.Task[None]) -> None:
        if self._pending.get(uri) is task:
            del self._pending[uri]

    async def _run(self, uri: str, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        snapshot = self._current(uri)
        if snapshot is None:
            return
        try:
            outcome = await self._lint(snapshot)
            if self._current(uri) == snapshot:
                self._deliver(outcome)
        except Exception as exc:  # noqa: BLE001 - one document's failure is reported; the server goes on
            if self._current(uri) == snapshot:
                self._fail(snapshot, exc)
