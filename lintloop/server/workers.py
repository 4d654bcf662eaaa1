"""The worker processes every analysis of a document runs in: how they start, and the executor that
runs each analysis in one (the CLI's runs use lintloop.isolation's pool directly)."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from multiprocessing import forkserver
from multiprocessing.context import BaseContext
from typing import Any

from lintloop.isolation import AnalysisError, AnalysisFailed, Limits, Outcome, WorkerPool

# What a worker runs (lint_analysis, safe_fix_changes) and the engine they use: imported once, by the fork server.
ENGINE_MODULES = ["lintloop.server.documents", "lintloop.engine"]


def worker_context() -> BaseContext:
    """Not fork: the server has threads, and a child forked from a threaded process can inherit a lock
    another thread held. A fork server where there is one: started once with the engine imported, it
    forks each worker ready to lint (a fresh worker in ~25 ms, where importing the engine takes ~0.5 s);
    elsewhere (Windows) spawn.

    The fork server is started now, from the standard library's folder: it runs as `python -c`, which
    puts its working directory first on its module path for good (Python 3.10-3.13 leave out the path
    they are given), so from the editor's workspace a `multiprocessing/` or `astroid.py` there would run
    in it and in every worker. From the standard library's folder that entry finds only what the path
    finds anyway. (The workers keep that folder as their working directory: they read files by absolute
    path.) Called before the server starts threads: changing directory is the whole process's."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(ENGINE_MODULES)
    try:
        here: str | None = os.getcwd()
    except OSError:  # a working directory removed since the server started: nothing there to run
        here = None
    os.chdir(os.path.dirname(os.__file__))
    try:
        forkserver.ensure_running()
    finally:
        if here is not None:
            os.chdir(here)
    return context


def _call(call: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]) -> Any:
    function, args, kwargs = call
    return function(*args, **kwargs)


class IsolatedExecutor(Executor):
    """An Executor whose calls run one at a time in a worker process within `limits` (see WorkerPool):
    a call that crashes, overruns or exhausts its worker raises AnalysisFailed from its future, one
    that raises gets AnalysisError, and the next call gets a fresh worker. For a process with threads
    (a language server) pass a "forkserver" or "spawn" context: fork is unsafe there."""

    def __init__(self, limits: Limits, context: BaseContext | None = None) -> None:
        self._pool = WorkerPool(1, limits, context)
        self._calls: deque[tuple[Future, Limits | None, tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]]
                           | None] = deque()
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._serve, name="lintloop-isolated-executor", daemon=True)
        self._shut = False
        self._thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self.submit_within(None, fn, *args, **kwargs)

    def submit_within(self, limits: Limits | None, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """`submit`, within `limits` (None: the executor's)."""
        future: Future = Future()
        with self._ready:
            if self._shut:
                raise RuntimeError("cannot submit after shutdown")
            self._calls.append((future, limits, (fn, args, kwargs)))
            self._ready.notify()
        return future

    def _serve(self) -> None:
        while True:
            with self._ready:
                while not self._calls:
                    self._ready.wait()
                call = self._calls.popleft()
            if call is None:
                self._pool.close()
                return
            future, limits, work = call
            if not future.set_running_or_notify_cancel():
                continue
            outcomes: list[Outcome] = []
            try:
                self._pool.run(_call, [work], 1, lambda _index, outcome: outcomes.append(outcome), limits)
            except BaseException as exc:  # noqa: BLE001 - the pool itself failed: the caller is told
                future.set_exception(exc)
                continue
            outcome = outcomes[0]
            if isinstance(outcome, (AnalysisFailed, AnalysisError)):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._ready:
            self._shut = True
            if cancel_futures:
                for call in self._calls:
                    if call is not None:
                        call[0].cancel()
                self._calls.clear()
            self._calls.append(None)
            self._ready.notify()
        if wait:
            self._thread.join()
