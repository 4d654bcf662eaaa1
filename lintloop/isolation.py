"""Analyses that may fail in any way, each costing only itself.

A file's analysis can die of a signal (a native parser overflowing its stack), run out of memory or
never end. So files are analysed in worker processes: a `WorkerPool` sends each worker a chunk of
items, and the worker publishes in a small shared-memory slot which item it is on and since when.
When a worker dies or overruns its limits, the parent knows which item did it: that item fails with
its cause, the rest of its chunk is sent again, and a fresh worker takes the dead one's place.

Limits: time per item, memory per worker (its resident set, read from /proc on Linux, where the
parent polls it; elsewhere only the time limit holds); a worker writing a user's file is not stopped
(`uninterruptible`). A worker runs its items on a thread with a large stack, where `deep_recursion`
may raise Python's recursion limit, so that deep but legitimate nesting is analysed rather than
overflowing; a worker ends with its parent.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # multiprocessing is imported where a worker starts: a run answered from the cache starts none
    from multiprocessing.connection import Connection
    from multiprocessing.context import BaseContext

Item = TypeVar("Item")

# Defaults of the `file-timeout` and `file-memory-limit` settings: far above what any real file
# needs (the largest file of the 2.3 M-line benchmark corpus, 280 kB, takes about a second and
# 300 MiB; a 5 MB file of training loops under a minute and 3 GiB), low enough that a pathological
# one is stopped before it stalls a run or exhausts a laptop.
DEFAULT_SECONDS = 120.0
DEFAULT_MEMORY_MIB = 4096

# The stack of a worker's thread (and of `with_big_stack`'s), and the recursion limit `deep_recursion`
# allows there: a CST visitor takes a few Python frames per level of nesting, and on Python 3.10 every
# frame also takes C stack. Reserved, not committed: memory is used only as deep as the recursion goes.
WORKER_STACK_BYTES = 512 * 1024 * 1024
WORKER_RECURSION_LIMIT = 200_000

# How often the parent looks at its workers' memory while they work.
POLL_SECONDS = 0.1
# A pool whose fresh workers keep dying before their first item has a broken environment.
MAX_BARREN_DEATHS = 3
# A chunk takes at most this share of what is left per worker (1/4): chunks shrink as the work runs out.
GUIDED_SHARES = 4

_IDLE, _WORKING, _WRITING = 0.0, 1.0, 2.0  # a worker's state, in its slot


@dataclass(frozen=True)
class Limits:
    """Per item: `seconds` of work (None: unbounded); per worker: `memory_mib` resident (None: unbounded)."""

    seconds: float | None = DEFAULT_SECONDS
    memory_mib: int | None = DEFAULT_MEMORY_MIB

    @classmethod
    def configured(cls, seconds: float | None, memory_mib: int | None) -> Limits:
        """The limits a configuration sets (`file-timeout`, `file-memory-limit`): None for the default,
        0 for no limit."""
        return cls(DEFAULT_SECONDS if seconds is None else (seconds or None),
                   DEFAULT_MEMORY_MIB if memory_mib is None else (int(memory_mib) or None))


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the platform tells; else all): the most
    workers a run starts, whatever a configuration or `--jobs` asks (more would only compete for them)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


class AnalysisFailed(Exception):
    """An item's work ended without a result: killed, crashed, over a limit. `cause` says how, as the
    end of a sentence ("took longer than 120 s (the file-timeout setting)")."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class AnalysisError(Exception):
    """An item's work raised an exception (a bug): its one-line `message` and its traceback."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message, details)
        self.message = message
        self.details = details


Outcome = Any  # the function's result, an AnalysisFailed or an AnalysisError


# ----- in the worker ---------------------------------------------------------------------------

_slot: Any = None  # this process's slot, when it is a worker


@contextlib.contextmanager
def uninterruptible() -> Iterator[None]:
    """While a worker writes a user's file, its time and memory limits are suspended: a kill in the
    middle of a write is never the parent's doing."""
    slot = _slot
    if slot is None:
        yield
        return
    slot[0] = _WRITING
    try:
        yield
    finally:
        slot[2] = time.monotonic()  # the write does not count against the item's time
        slot[0] = _WORKING


# Threads whose stack takes deep recursion: a worker's, and those `with_big_stack` starts.
_BIG_STACK_THREAD = "lintloop-big-stack"


def with_big_stack(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` on a thread with a large stack (this one, if it has one): where a deep but
    legitimate program cannot overflow the C stack (CPython 3.10's parser recurses without bound)."""
    if threading.current_thread().name == _BIG_STACK_THREAD:
        return function(*args)
    outcome: list[Any] = []
    failure: list[BaseException] = []

    def call() -> None:
        try:
            outcome.append(function(*args))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    previous = threading.stack_size(WORKER_STACK_BYTES)
    try:
        thread = threading.Thread(target=call, name=_BIG_STACK_THREAD)
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


@contextlib.contextmanager
def deep_recursion() -> Iterator[None]:
    """Python's recursion limit raised for a deep but bounded walk, on a thread with the stack for it
    (elsewhere the limit stays as it is). Only around the walks that need it: on Python 3.10 and 3.11
    the limit also decides how deep a program CPython's parser and compiler accept, which must not vary."""
    if threading.current_thread().name != _BIG_STACK_THREAD:
        yield
        return
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, WORKER_RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC paused while one item (a file) is analysed. A file's tree and analyses stay alive
    until its end, and every collection meanwhile traverses them again: a file ×10 the size cost ×12.9
    the time with the GC running, ×11 with it paused (bench/scaling.py: a class of 5,000 methods).
    Its cycles are collected after it, from the young generation only, at a cost linear in what the
    file left; the file's memory limit bounds what it may leave meanwhile."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _worker_main(connection: Connection, slot: Any, gc_thresholds: tuple[int, ...],
                 initializer: Callable[[], None] | None = None) -> None:
    global _slot
    _slot = slot
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops the workers
    faulthandler.disable()  # a crash is reported as the file's outcome, not as a dump on the terminal
    gc.set_threshold(*gc_thresholds)
    if initializer is not None:
        initializer()
    threading.stack_size(WORKER_STACK_BYTES)
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_end_with, args=(parent,), name="lintloop-parent-watch", daemon=True).start()
    serving = threading.Thread(target=_serve, args=(connection, slot), name=_BIG_STACK_THREAD)
    serving.start()
    serving.join()


def _end_with(parent: Any) -> None:
    """A worker outlives no parent (a parent killed cannot stop its workers: one busy with an endless
    file would run on for ever)."""
    from multiprocessing.connection import wait

    wait([parent.sentinel])
    os._exit(1)


def _serve(connection: Connection, slot: Any) -> None:
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        except Exception:  # noqa: BLE001 - a message that does not unpickle here: each of its items fails
            connection.send((None, traceback.format_exc(), False))
            continue
        if message is None:
            return
        function, items = message
        outcomes: list[tuple[int, Outcome]] = []
        exhausted = False
        for index, item in items:
            slot[1], slot[2] = index, time.monotonic()
            slot[0] = _WORKING
            try:
                with gc_paused():
                    outcomes.append((index, function(item)))
            except MemoryError:
                outcomes.append((index, AnalysisFailed("ran out of memory")))
                exhausted = True  # what is left of the heap is not worth trusting: start afresh
                break
            except RecursionError:
                outcomes.append((index, AnalysisFailed("exceeded Python's recursion limit (nesting too deep)")))
            except Exception as exc:  # noqa: BLE001 - a bug: reported for this item, the others go on
                outcomes.append((index, AnalysisError(f"{type(exc).__name__}: {exc}", traceback.format_exc())))
        slot[0] = _IDLE
        connection.send((outcomes, [i for i, _ in items[len(outcomes):]], exhausted))
        if exhausted:
            return


# ----- in the parent ---------------------------------------------------------------------------


class _Worker:
    def __init__(self, context: BaseContext, initializer: Callable[[], None] | None = None) -> None:
        self.slot = context.RawArray("d", 3)
        self.connection, child_end = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child_end, self.slot, gc.get_threshold(), initializer),
                                       daemon=True, name="lintloop-worker")
        self.process.start()
        child_end.close()
        self.chunk: list[tuple[int, Any]] = []
        self.served = 0  # chunks it has answered
        self.killed_because: str | None = None

    @property
    def current(self) -> int | None:
        """The index of the item it is working on, if any."""
        return int(self.slot[1]) if self.slot[0] != _IDLE else None

    def overrun(self, limits: Limits, now: float) -> str | None:
        """Why it must be stopped now, if it must."""
        if self.slot[0] != _WORKING:
            return None
        if limits.seconds is not None and now - self.slot[2] > limits.seconds:
            return f"took longer than {limits.seconds:g} s (the file-timeout setting)"
        if limits.memory_mib is not None:
            resident = _resident_bytes(self.process.pid)
            if resident is not None and resident > limits.memory_mib * 1024 * 1024:
                return f"used more than {limits.memory_mib} MiB of memory (the file-memory-limit setting)"
        return None

    def kill(self, cause: str | None = None) -> None:
        self.killed_because = cause
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join()
        self.connection.close()

    def death_cause(self) -> str:
        if self.killed_because is not None:
            return self.killed_because
        self.process.join()
        code = self.process.exitcode
        if code is not None and code < 0:
            number = -code
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            described = signal.strsignal(number) or name
            return f"crashed with {name} ({described.lower()})"
        return f"ended with exit status {code}"


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None  # not Linux, or already gone


def default_context() -> BaseContext:
    """fork where there is one: workers start at once and inherit the imported engine."""
    import multiprocessing

    return multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")


class WorkerPool:
    """Up to `workers` processes running a function over items, within `limits`; see the module docstring."""

    def __init__(self, workers: int, limits: Limits, context: BaseContext | None = None,
                 initializer: Callable[[], None] | None = None) -> None:
        """`initializer`: called in each worker as it starts (module-level, like `run`'s function)."""
        self.size = max(1, workers)
        self.limits = limits
        self.context = context or default_context()
        self.initializer = initializer
        self._idle: list[_Worker] = []
        self._busy: list[_Worker] = []

    def start(self) -> None:
        """Start every worker now (else each starts when `run` first needs it): their initializer runs
        while this process prepares the work."""
        self._idle += [_Worker(self.context, self.initializer) for _ in range(self.size - len(self._idle) - len(self._busy))]

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self, function: Callable[[Item], Any], items: Sequence[Item], chunk_size: int,
            on_outcome: Callable[[int, Outcome], None], limits: Limits | None = None) -> None:
        """Call `on_outcome(index, outcome)` once per item, in completion order: `function(item)`'s
        result, or an AnalysisFailed / AnalysisError. `function` must be picklable (module-level).
        Items go to the workers in order, in chunks of up to `chunk_size` (`_next_chunk`). `limits`:
        this run's, instead of the pool's."""
        from multiprocessing.connection import wait

        limits = limits or self.limits
        unsent = deque(enumerate(items))
        pending: deque[list[tuple[int, Item]]] = deque()  # chunks sent again (their worker died)
        barren_deaths = 0
        while pending or unsent or self._busy:
            while (pending or unsent) and (self._idle or len(self._busy) < self.size):
                worker = self._idle.pop() if self._idle else _Worker(self.context, self.initializer)
                worker.chunk = pending.popleft() if pending else self._next_chunk(unsent, chunk_size)
                try:
                    worker.connection.send((function, worker.chunk))
                except (BrokenPipeError, OSError):
                    pass  # it died already: found below, as any death
                self._busy.append(worker)
            ready = set(wait([w.connection for w in self._busy] + [w.process.sentinel for w in self._busy],
                             timeout=None if limits == Limits(None, None) else POLL_SECONDS))
            now = time.monotonic()
            for worker in list(self._busy):
                answered = worker.connection in ready and self._receive(worker, pending, on_outcome)
                if answered:
                    barren_deaths = 0
                    continue
                cause = None if worker.process.sentinel in ready else worker.overrun(limits, now)
                if worker.process.sentinel not in ready and cause is None:
                    continue
                if cause is not None:
                    worker.kill(cause)
                if not self._bury(worker, pending, on_outcome) and worker.served == 0:
                    barren_deaths += 1
                    if barren_deaths > MAX_BARREN_DEATHS:
                        raise RuntimeError(f"lintloop's worker processes keep failing at start: {worker.death_cause()}")

    def _next_chunk(self, unsent: deque[tuple[int, Item]], chunk_size: int) -> list[tuple[int, Item]]:
        """Up to `chunk_size` items, fewer as the work runs out (guided scheduling): the last chunks are
        small, so that no worker is left with a long one while the others have finished."""
        size = min(max(1, chunk_size), max(1, len(unsent) // (self.size * GUIDED_SHARES)))
        return [unsent.popleft() for _ in range(min(size, len(unsent)))]

    def _receive(self, worker: _Worker, pending: deque, on_outcome: Callable[[int, Outcome], None]) -> bool:
        try:
            outcomes, unserved, exiting = worker.connection.recv()
        except (EOFError, OSError):
            return False  # it died: its sentinel tells
        self._busy.remove(worker)
        worker.served += 1
        if outcomes is None:  # it could not read the chunk (`unserved` holds why)
            outcomes = [(index, AnalysisError("the work could not be read by the worker process: "
                                              f"{unserved.strip().splitlines()[-1]}", unserved))
                        for index, _ in worker.chunk]
            unserved = []
        if unserved:  # it stopped early (out of memory): the rest of its chunk goes to a fresh worker
            left = set(unserved)
            pending.appendleft([pair for pair in worker.chunk if pair[0] in left])
        for index, outcome in outcomes:
            on_outcome(index, outcome)
        if exiting:
            worker.kill()
        else:
            self._idle.append(worker)
        return True

    def _bury(self, worker: _Worker, pending: deque, on_outcome: Callable[[int, Outcome], None]) -> bool:
        """A worker that died or was killed: its current item fails, the rest of its chunk is sent again.
        Returns whether an item was blamed."""
        current = worker.current
        self._busy.remove(worker)
        cause = worker.death_cause()
        with contextlib.suppress(OSError):
            worker.connection.close()
        rest = [pair for pair in worker.chunk if pair[0] != current]
        if rest:
            pending.appendleft(rest)
        if current is None or len(rest) == len(worker.chunk):
            return False
        on_outcome(current, AnalysisFailed(cause))
        return True

    def close(self) -> None:
        """Stop every worker now (idle ones are asked, busy ones killed)."""
        for worker in self._idle:
            with contextlib.suppress(OSError):
                worker.connection.send(None)
        for worker in self._busy:
            worker.kill()
        for worker in self._idle:
            worker.process.join(timeout=1)
            if worker.process.is_alive():
                worker.kill()
            with contextlib.suppress(OSError):
                worker.connection.close()
        self._idle, self._busy = [], []
