"""Run a user's script under the runtime probe, in a child process, and collect its events.

``run_probe(script, argv)`` starts ``python SCRIPT ARGS`` with the probe bootstrap
(``bootstrap/sitecustomize.py``, which loads the package ``bootstrap/_lintloop_probe/``)
first on ``PYTHONPATH``: the script runs unmodified as ``__main__`` with its own argv and
its own directory on ``sys.path``; the bootstrap installs hooks when torch / tensorflow /
keras / jax are imported, in the child and in every Python process it spawns, and appends
events to a JSON-lines file that this module reads back.  The runner itself never imports
a framework.

Containment -- limits and clean-up, not a sandbox: the program can do whatever its user can.
It is started by a supervisor (``supervisor.py``, which says what holds where), between lintloop and
the program.  Where Linux allows it, the program runs in a PID namespace of its own whose init is the
supervisor: nothing in it can signal anything outside it, and the kernel kills all of it when the
supervisor ends.  Elsewhere the supervisor and a guard above it are child subreapers (Linux ``prctl``):
the orphans of the program's processes are re-parented to them, not to init, so every process the
program starts stays among their descendants whatever it does -- ``setsid``, forking twice, ``execve``
with an empty environment -- and a program that kills the supervisor hands them to the guard, which
ends the run (``ProbeRun.lost_supervisor``).  ``ProbeRun.containment`` says which held.  A wall-clock
timeout and a memory limit (over all of those processes) are enforced from lintloop.  When the
program ends, times out or goes over the limit, the supervisor kills (SIGKILL, which a daemon cannot
ignore) its children until it has none left, reaping them; so it does if lintloop itself dies.
Then, as a fallback for what the supervisor could not keep (no subreaper on macOS; a program that
killed it and its guard), every process still running that is in the run's process group or holds the
run's token in its environment (``LINTLOOP_PROBE_RUN``) is killed too, again until none is left.  The
processes that were still running besides the main one are reported: their number is
``ProbeRun.left_running``, and each is a ``left_running`` event (in a namespace, with the number the
program knows it by).  Output is drained as it comes (no pipe fills, however much is printed) and only
its tails are kept.  What the program changes in files is reported, not prevented
(``ProbeRun.file_changes``, ``changes.py``: its working folder compared before and after the run, and
the paths its Python code named); it runs in ``cwd`` (default: ours).  The memory limit polls (every
0.2 s) the resident memory of those processes (the RSS sum, confirmed with PSS before a kill so that
pages forked workers share are counted once), so a burst faster than the poll can pass it before the
kill.  ``RLIMIT_AS`` is not used: it limits virtual address space, and TensorFlow reserves ~4x what
it uses (measured: VmPeak 1.8-2.2 GiB for 0.53 GiB resident on CPU; under a 2 GiB limit TF aborts
with SIGABRT, under 1 GiB it segfaults -- crashes, not a MemoryError -- and CUDA reserves far more).
This runs the user's code: only on request.

Event schema (every event has ``type``, ``pid`` and ``t`` = seconds since that process
started; events tied to user code have ``file`` (absolute path) and ``line`` of the
innermost user frame -- outside the frameworks, site-packages, the standard library and the
probe, with autograph-generated code mapped back to the user's source):

- ``start``: ``root`` (the main process, which the supervisor started), ``ppid``, ``argv``, ``executable``,
  ``python``, ``cwd``, ``wall``, ``config``; ``forked: true`` for a forked child.
- ``framework``: ``framework`` (torch|tensorflow|keras|tf_keras|jax), ``version``, ``hooks``.
- ``step``: ``n``, ``kind`` (optimizer_step|apply_gradients|tape_gradient|tf_function_call),
  ``mem`` (bytes), ``mem_source`` (mallinfo2|mallinfo|mstats|rss|cuda|tf_gpu), ``host_mem``
  (with a device source), torch: ``optimizer``, ``grad_norm`` (global L2 norm of the
  gradients; None if not finite) and ``nonfinite_grads``; eager TensorFlow (``tape_gradient``,
  ``apply_gradients``): ``grad_norm`` of the step's ``tape.gradient`` results; keras:
  ``optimizer``; tf.function: ``function``, ``fallback`` (a call
  of a function that computes no gradients, counted only while nothing else counts as a
  step).  Emitted for step 1, every ``sample_every``-th step and the last step.  What counts
  as a step: a torch optimizer step (of the first optimizer; another one only while that one
  is idle), an eager Keras ``apply_gradients``, an eager ``tape.gradient`` (until an
  ``apply_gradients`` shows up: then the pair is one step), and the call of a tf.function
  whose trace computed gradients, when no eager step happened inside it.
- ``none_gradients``: ``framework``, ``none``, ``total``, ``step``; torch: ``zero``
  (all-zero grads), ``optimizer``, ``shapes``; tensorflow: ``eager``, ``names`` (of the
  sources whose gradient is None).  Emitted when the counts change at a site.
- ``params_unchanged``: ``step``, ``optimizer``, ``params``, ``method`` (values|versions):
  an optimizer step that changed no parameter (checked at steps 1-3 and every 10th).
- ``error``: ``where`` (uncaught|thread|process|worker|backward|tape.gradient|
  apply_gradients), ``exc_type``, ``exc_module``, ``message`` (first line), ``frames``
  ([file, line, function] user frames, outermost first), ``exc_id``, ``cause``
  ({exc_type, message}), ``thread`` / ``process`` / ``rank`` where relevant.  The same
  exception can appear twice (e.g. ``backward`` then ``uncaught``) with the same ``exc_id``.
- ``warning``: ``category`` (warning class, or ``tf_logging.WARNING``...), ``message``,
  ``origin_file`` / ``origin_line`` (where the warning was attributed).
- ``trace``: ``function``, ``traces`` (so far), ``call`` (index of the call that traced),
  ``args`` (short description of the call's arguments), ``def_file`` / ``def_line``.
- ``trace_print``: ``function``, ``text``: builtin print run while tracing.
- ``tf_function`` (at the end): ``function``, ``file``/``line`` (definition), ``traces``,
  ``calls`` (eager calls), ``instances`` (distinct Function objects), ``trains``.
- ``strategy``: ``strategy`` (class name), ``replicas`` -- once per strategy kind.
- ``per_replica_mean``: ``replicas``, ``loss`` (loss class), ``reduction``: tf.reduce_mean
  applied to a reduction-none Keras loss output in a replica context of several replicas.
- ``replica_values``: ``values`` (per-replica scalars of an eager ``strategy.run``), ``step``.
- ``live_objects``: ``step``, ``at`` (warmup|last), ``tf_eager_tensors``,
  ``torch_tensors``, ``torch_tensors_with_grad_fn``, ``cost_s``.
- ``eval_forward`` (torch): an outermost call (not from inside another module's forward) of a
  module in eval mode: ``module`` (class), ``key`` (names the module within the process),
  ``n`` (its eval-mode calls so far: the "step" of this memory series), ``grad`` (autograd
  enabled), ``mem``, ``mem_source``, ``host_mem``; ``file``/``line`` on the first.  Every call
  up to 100 per module, then every 10th.  ``eval_forwards`` (at the end): ``calls``,
  ``with_grad`` per module.
- ``eval_mode_step`` (torch): the first optimizer step whose model (parameters in that
  optimizer) ran its last outermost forward before it with autograd on, in eval mode, with
  Dropout (p > 0) / BatchNorm (tracking statistics) submodules in eval mode: ``step``,
  ``optimizer``, ``module``, ``eval_submodules`` ({class: count}), ``file``/``line`` of that
  forward, ``step_line``.  ``eval_mode_steps`` (at the end): ``steps``, ``of_steps``,
  ``first_step``.
- ``ddp_bypass`` (torch): the first optimizer step after an outermost, grad-enabled forward of
  a module wrapped by ``DistributedDataParallel`` (or of one of its submodules) with no
  forward of the wrapper since the previous step: ``step``, ``module``, ``rank``,
  ``ddp_forwards`` (wrapper forwards so far), ``file``/``line`` of that forward.
  ``ddp_forwards`` (at the end, where a wrapper was built): ``wrappers``, ``ddp_forwards``,
  ``bypassed_forwards``, ``bypass_steps``, ``steps``, ``rank``.
- ``sampler_epoch`` (torch): one pass over a ``DistributedSampler``: ``sampler`` (names it
  within the process), ``sampler_class``, ``iteration`` (its passes so far), ``epoch``,
  ``shuffle``, ``seed``, ``rank``, ``num_replicas``, ``samples``, ``first`` (first 5
  indices), ``digest`` (of the whole order).
- ``cross_entropy_input`` (torch): a checked ``F.cross_entropy`` input (calls 1-5, then every
  50th), the first of each kind per call site: ``probabilities`` (every value in [0, 1] and
  rows summing to 1 within 1e-3 along the class dimension), ``call``, ``shape``, ``min``,
  ``max``, ``row_sum_error``, ``requires_grad``.  ``cross_entropy_inputs`` (at the end):
  ``calls``, ``checked``, ``probabilities``.
- ``device`` (torch, with ``device="cuda"`` only): ``requested``, ``cuda_available``,
  ``devices``, ``name``.  On CUDA, ``step`` events of torch also carry ``peak`` (the
  allocator's peak since the previous sample, which the probe then resets).
- ``grads_carried`` (torch): the gradients applied at optimizer step ``from_step`` were still in
  ``.grad``, never reset, when a later ``backward()`` added to them before ``step``: ``params``,
  ``total``, ``optimizer``, ``grad_norm``, ``backwards``, ``backward_file``/``backward_line``.
- ``accumulation`` (torch): ``backwards`` (>= 2) backward passes before optimizer step ``step``:
  ``loss_scales`` (each backwarded loss over the loss function's own output), ``backward_lines``,
  ``norms`` (gradient norm after each), ``grad_norm`` (at the step), ``reset_between``.
- ``step_order`` (torch): ``order`` (step_before_backward|reset_between_backward_and_step),
  ``step``, ``optimizer``; for a reset: ``reset``, ``reset_file``/``reset_line``,
  ``backward_file``/``backward_line``.
- ``retain_graph`` (torch): one checked ``backward(retain_graph=True)`` call: ``call``, ``step``,
  ``nodes``, ``saved_bytes``, ``reused`` (a later backward ran through the graph),
  ``freed_at_step``, ``resolved_by``.  ``retain_graph_calls`` (at the end): ``calls``,
  ``checked`` per line.
- ``fp16_underflow`` (torch): a sampled backward under float16 autocast whose float32 gradients
  became 0 or subnormal when cast to float16: ``step``, ``scaled``, ``casts``, ``nonzero``,
  ``to_zero``, ``subnormal``.
- ``scaled_step`` (torch): an optimizer step outside ``scaler.step()`` on gradients still
  multiplied by the loss scale: ``step``, ``optimizer``, ``scale``, ``grad_norm``.
  ``scaled_clip``: ``clip_grad_norm_`` on scaled gradients: ``step``, ``max_norm``,
  ``total_norm``, ``scale``.
- ``stop``: ``reason`` (step_limit|exit|error), ``steps``, ``kinds`` (steps by kind),
  ``checks`` (gradient checks by kind).
- ``probe_error``: ``where``, ``message``: a hook failed (the program was not affected).
- ``left_running`` (added by the runner, after the program's events): a process of the program
  besides the main one that was still running at its end, then killed: ``t`` (its age then),
  ``command`` (its argv; None where it could not be read).
- ``file``: ``action`` (write: opened for writing or truncated|mkdir|rename|remove|rmdir|rmtree|
  symlink|link), ``path`` (absolute, its folders' links resolved; for a write, the file a link at
  its end names), ``before`` (the entry at the path just before the call, which may fail:
  [kind, size, mtime_ns, inode, device, mode, link target], or None), ``to`` and ``to_before`` (of a
  rename), ``file``/``line`` where it happened: the first time the process does that to that path,
  through Python (what native code writes by itself is not seen); ``__pycache__`` and /dev, /proc,
  /sys left out; ``file_limit``: past 200 per process.  A call, not a change: ``ProbeRun.files``
  gives what changed.

Each process writes its own events in order, each at once (a killed process has lost none);
group by ``pid`` before reading a series -- workers count their own steps.

A Jupyter notebook (``.ipynb``) runs as Jupyter's "Run All" runs it: its code cells, in order, as
one program (``lintloop.notebook``'s module text, IPython lines masked as ``pass`` / ``x = None``
and other-language cells such as ``%%bash`` left out, so that they do not run), written as a
script into a temporary directory and run with the notebook's directory as working directory and
on ``sys.path``.  Every location in the events that lies in that script is given back in the
notebook's terms: the file is the notebook, the line the line in its cell, and a ``cell`` key
beside it (``def_cell`` beside ``def_line``...; ``frames`` get the cell as a fourth item).
``ProbeRun.notebook`` says which lines were not run.
"""
from __future__ import annotations

import ast
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lintloop import bounded_json
from lintloop.notebook import MASK_MARKER, CellPosition, Notebook, NotebookError, NotebookModule, is_notebook
from lintloop.runtime_probe.changes import FileChanges, Listing, file_changes
from lintloop.runtime_probe.supervisor import END_S, describe_process, process_stat
from lintloop.source import SourceText, UndecodableSource

__all__ = ["NotebookProgram", "ProbeRun", "run_probe", "bootstrap_dir", "strip_framework_noise", "read_events"]

TAIL_CHARS = 4000
_POLL_S = 0.2


def bootstrap_dir() -> Path:
    """The directory the child gets first on PYTHONPATH (holds ``sitecustomize.py`` and the
    package ``_lintloop_probe`` it loads)."""
    path = Path(__file__).resolve().parent / "bootstrap"
    for needed in ("sitecustomize.py", "_lintloop_probe/__init__.py"):
        if not (path / needed).is_file():
            raise FileNotFoundError(
                f"the probe bootstrap is missing ({path / needed}); "
                "reinstall lintloop (package lintloop.runtime_probe.bootstrap)")
    return path


@dataclass
class ProbeRun:
    events: list[dict]
    returncode: int | None
    timed_out: bool
    killed_for_memory: bool
    stdout_tail: str
    stderr_tail: str
    duration: float
    command: list[str] = field(default_factory=list)
    peak_memory_mb: float | None = None  # peak RSS sum of the process tree (when polled)
    notebook: NotebookProgram | None = None  # what ran of a notebook (None: a script ran)
    memory_limit_mb: int | None = None  # the limit the run had (None: none)
    # Processes of the program besides the main one still running at its end, then killed (each a left_running event).
    left_running: int = 0
    output_bytes: int = 0  # what the program wrote to stdout and stderr (only the tails are kept)
    # What kept the program's processes in reach: "pid namespace", or "process tree" (with why no namespace).
    containment: str | None = None
    # How the supervisor's process that held the program ended before the program did, where it did (the program
    # killed it): the run ended there, and the main process's status is unknown.
    lost_supervisor: str | None = None
    file_changes: FileChanges | None = None  # what the program changed in files (None: not followed)

    @property
    def signal_name(self) -> str | None:
        """The signal that ended the program ("SIGSEGV"), or None where it exited."""
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def files(self) -> list[dict]:
        """What the program changed in files (``changes.py``), in the order of their paths: each a dict with
        ``change`` (created|deleted|modified|replaced|renamed), ``path``, ``kind`` and, where its Python code
        named the path, ``file``/``line``/``pid`` of the first call that did."""
        return [] if self.file_changes is None else [change.to_json() for change in self.file_changes.changes]

    def of_type(self, *types: str) -> list[dict]:
        return [e for e in self.events if e.get("type") in types]


@dataclass(frozen=True)
class DroppedLine:
    """A notebook line the probe does not run: IPython syntax, or a line of a cell in another language."""

    cell: int
    line: int
    text: str


# Event keys that hold a location: (file key, line key, the cell key added beside them).
_LOCATIONS = (("file", "line", "cell"), ("def_file", "def_line", "def_cell"),
              ("origin_file", "origin_line", "origin_cell"), ("backward_file", "backward_line", "backward_cell"),
              ("reset_file", "reset_line", "reset_cell"), ("first_file", "first_line", "first_cell"))
# Lines (and lists of lines) in the event's own `file`: (line key, cell key).
_LINES_IN_FILE = (("step_line", "step_cell"), ("batch_line", "batch_cell"), ("map_line", "map_cell"),
                  ("backward_lines", "backward_cells"))
_MASKED_LINE = re.compile(re.escape(MASK_MARKER) + r"(\d+)$")


@dataclass
class NotebookProgram:
    """A notebook's code cells as the one program the probe runs, and the lines of them that do not run."""

    path: Path
    module: NotebookModule
    dropped: list[DroppedLine]
    # The first cell that does not parse: the run stops before it, as Jupyter's "Run All" does.
    stops_before: int | None = None

    @classmethod
    def read(cls, path: Path) -> NotebookProgram:
        """Raises NotebookError for a file that is no notebook, or a notebook of another language."""
        try:
            notebook = Notebook.parse(SourceText.from_bytes(Path(path).read_bytes()).text)
        except UndecodableSource as exc:
            raise NotebookError(f"not a notebook: {exc}") from None
        if not notebook.python:
            raise NotebookError("not a Python notebook: its kernel runs another language")
        module = notebook.module()
        stops_before = _first_broken_cell(module)
        if stops_before is not None:
            module = notebook.module(leave_out=frozenset(c.index for c in notebook.cells if c.index >= stops_before))
        dropped = []
        for number, text in enumerate(module.text.splitlines(), 1):
            masked = _MASKED_LINE.search(text)
            if masked is not None and int(masked.group(1)) in module.masked:
                where = module.position(number)
                dropped.append(DroppedLine(where.cell, where.line, module.masked[int(masked.group(1))]))
        run_cells = set(module.cells)
        for cell in notebook.cells:  # cells in another language (`%%bash`): every line of them
            if cell.index not in run_cells and (stops_before is None or cell.index < stops_before):
                dropped.extend(DroppedLine(cell.index, number, line)
                               for number, line in enumerate(cell.source.splitlines(), 1) if line.strip())
        return cls(Path(path), module, sorted(dropped, key=lambda d: (d.cell, d.line)), stops_before)

    def write_script(self, directory: Path) -> Path:
        """The program as a script in `directory`, named `NAME.ipynb.py`: no `import` can reach that name,
        so a module beside the notebook with the notebook's stem is not shadowed by it."""
        script = directory / f"{self.path.name}.py"
        script.write_text(self.module.text, encoding="utf-8")
        return script

    def position(self, line: int) -> CellPosition:
        return self.module.position(line)

    def locate(self, events: list[dict[str, Any]], script: Path) -> None:
        """Give every location in `script` that the events hold back in the notebook's terms, in place."""
        script_file, notebook_file = os.path.realpath(script), str(self.path.resolve())
        known: dict[str, bool] = {}

        def in_script(file: object) -> bool:
            if not isinstance(file, str):
                return False
            if file not in known:
                known[file] = os.path.realpath(file) == script_file
            return known[file]

        for event in events:
            own_file = event.get("file")
            if own_file is None or in_script(own_file):
                for line_key, cell_key in _LINES_IN_FILE:
                    self._locate_lines(event, line_key, cell_key)
            for file_key, line_key, cell_key in _LOCATIONS:
                if in_script(event.get(file_key)) and isinstance(event.get(line_key), int):
                    where = self.position(event[line_key])
                    event[file_key], event[line_key], event[cell_key] = notebook_file, where.line, where.cell
            frames = event.get("frames")
            if isinstance(frames, list):  # [file, line, function]: [notebook, line, function, cell]
                event["frames"] = [self._frame(notebook_file, frame) if isinstance(frame, list) and len(frame) == 3
                                   and in_script(frame[0]) and isinstance(frame[1], int) else frame
                                   for frame in frames]

    def _frame(self, notebook_file: str, frame: list[Any]) -> list[Any]:
        where = self.position(frame[1])
        return [notebook_file, where.line, frame[2], where.cell]

    def _locate_lines(self, event: dict[str, Any], line_key: str, cell_key: str) -> None:
        value = event.get(line_key)
        if isinstance(value, int):
            where = self.position(value)
            event[line_key], event[cell_key] = where.line, where.cell
        elif isinstance(value, list):
            places = [self.position(n) if isinstance(n, int) else None for n in value]
            event[line_key] = [p.line if p is not None else n for p, n in zip(places, value)]
            event[cell_key] = [p.cell if p is not None else None for p in places]

    def to_json(self, shown: int | None = None) -> dict[str, Any]:
        """What did not run: the number of dropped lines, and the first `shown` of them (all: None)."""
        return {"notebook": str(self.path), "cells": self.module.cells, "dropped_lines": len(self.dropped),
                "dropped": [{"cell": d.cell, "line": d.line, "text": d.text} for d in self.dropped[:shown]],
                "stops_before_cell": self.stops_before}


def _first_broken_cell(module: NotebookModule) -> int | None:
    """Where the module does not parse: its first cell that does not parse by itself (None: it parses)."""
    try:
        ast.parse(module.text)
        return None
    except (SyntaxError, ValueError):
        pass
    for cell, text in module.cell_texts().items():
        try:
            ast.parse(text)
        except (SyntaxError, ValueError):
            return cell
    return None


# TF / absl start-up noise that reaches stderr even with TF_CPP_MIN_LOG_LEVEL=3.
_NOISE = [
    re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w.\-/]+:\d+\] "),  # absl C++ log line
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called"),
    re.compile(r"^This TensorFlow binary is optimized to use available CPU instructions"),
    re.compile(r"^To enable the following instructions: .*rebuild TensorFlow"),
    re.compile(r"^Could not find cuda drivers on your machine"),
]


def strip_framework_noise(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True)
                   if not any(p.match(line) for p in _NOISE))


# What the parent reads of the events the program's process wrote (it can write anything there): the
# first MAX_EVENTS objects, each on a line of at most MAX_EVENT_LINE_BYTES, nested within bounded_json's
# depth. A run of the probe writes a few hundred; what is past the bounds is counted, not read.
MAX_EVENTS = 200_000
MAX_EVENT_LINE_BYTES = 1 << 20


def read_events(path: Path) -> list[dict]:
    """The events of a run, in order: each line of the file that is a JSON object within bounds (a line
    cut short by a kill, or one the program wrote that is not an event, is passed over); past
    MAX_EVENTS, one `events_truncated` event says how many lines were not read."""
    events: list[dict] = []
    unread = 0
    try:
        with open(path, "rb") as fh:
            while raw := fh.readline(MAX_EVENT_LINE_BYTES + 1):
                if len(raw) > MAX_EVENT_LINE_BYTES and not raw.endswith(b"\n"):
                    while (rest := fh.readline(MAX_EVENT_LINE_BYTES)) and not rest.endswith(b"\n"):
                        pass  # a line too long to be an event: passed over, a piece at a time
                    continue
                if len(events) >= MAX_EVENTS:
                    unread += 1
                    continue
                line = raw.strip()
                if not line:
                    continue
                try:
                    event = bounded_json.loads(line.decode("utf-8", "replace"))
                except (ValueError, RecursionError):  # cut short, over the bounds, not JSON
                    continue
                if isinstance(event, dict):
                    events.append(event)
    except FileNotFoundError:
        pass
    if unread:
        events.append({"type": "events_truncated", "unread_lines": unread})
    return events


class _Tail(threading.Thread):
    """Drain a pipe, keeping the last `keep` bytes (the program's output never fills a pipe, and
    however much it prints, we hold at most `keep` bytes of it)."""

    def __init__(self, stream, keep=256 * 1024):
        super().__init__(daemon=True)
        self.stream = stream
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.total = 0
        self.keep = keep
        self._lock = threading.Lock()

    def run(self):
        read = getattr(self.stream, "read1", self.stream.read)
        while True:
            try:
                data = read(65536)
            except (OSError, ValueError):
                break
            if not data:
                break
            with self._lock:
                self.chunks.append(data)
                self.size += len(data)
                self.total += len(data)
                while self.size - len(self.chunks[0]) >= self.keep and len(self.chunks) > 1:
                    self.size -= len(self.chunks.popleft())

    def text(self) -> str:
        with self._lock:
            data = b"".join(self.chunks)
        return data[-self.keep:].decode("utf-8", "replace")


def _tail(text: str, n: int = TAIL_CHARS) -> str:
    return text[-n:]


_RUN_VAR = "LINTLOOP_PROBE_RUN"  # in the environment of every process of a run: a token naming the run


@dataclass(frozen=True)
class _Run:
    """Finds the processes of one run of the probe."""

    token: str  # in the environment of every process of the run, as _RUN_VAR
    started: int  # the process we started (the supervisor's first): the processes of the program are its descendants
    ours: frozenset[int]  # the supervisor's processes: the one we started, the one that holds the program (in a
    # namespace: its init), and any between them
    group: int | None  # the run's process group: the main process's number (Linux reuses no number that names a
    # group); None in a namespace, where the main process's number is not the system's
    since: int  # the supervisor's start (clock ticks since boot): no process older than it is of the run

    @classmethod
    def of(cls, token: str, program: _Supervised) -> _Run:
        started = program.process.pid
        stat = process_stat(started)
        ours, pid = {started}, program.supervisor
        while pid not in ours and pid > 1:  # from the one that holds the program up to the one we started
            ours.add(pid)
            above = process_stat(pid)
            if above is None:
                break
            pid = int(above[1])
        return cls(token, started, frozenset(ours), None if program.in_namespace else program.pid,
                   int(stat[19]) if stat is not None else 0)

    def pids(self, descendants: bool = True) -> dict[int, int | None]:
        """The live processes of the run, each with its start (clock ticks since boot; None where unknown):
        the descendants of the supervisor we started (only while we have not reaped it: then its number is
        still its own), the members of the run's process group, and every process whose environment holds
        the run's token; the supervisor's own processes left out.  In a namespace its descendants are all
        there are; outside one, as subreapers, the supervisor's two processes keep every process the program
        starts among their descendants; the group and the token find them where they could not (no prctl,
        or the program killed them).  Zombies are left out (they hold no memory and are reaped by their
        parent).  Linux reads /proc (the environment only of the processes started since the run); elsewhere
        the descendants come from psutil, if installed."""
        if not os.path.isdir("/proc"):
            return dict.fromkeys(_tree_pids_psutil(self.started) - self.ours) if descendants else {}
        needle = f"{_RUN_VAR}={self.token}\0".encode()
        children: dict[int, list[int]] = {}
        starts: dict[int, int] = {}
        found: dict[int, int | None] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            pid = int(entry.name)
            stat = process_stat(pid)
            if stat is None or stat[0] in (b"Z", b"X"):
                continue
            starts[pid] = int(stat[19])
            children.setdefault(int(stat[1]), []).append(pid)
            if pid not in self.ours and (int(stat[2]) == self.group or
                                         (starts[pid] >= self.since and _environment_holds(pid, needle))):
                found[pid] = starts[pid]
        todo = list(children.get(self.started, ())) if descendants else []
        while todo:
            pid = todo.pop()
            if pid not in self.ours:
                found[pid] = starts[pid]
            todo.extend(children.get(pid, ()))
        return found


def _environment_holds(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return needle in fh.read()
    except OSError:  # another user's process, or it just ended
        return False


def _tree_pids_psutil(root_pid: int) -> set[int]:
    try:
        import psutil  # optional, for macOS
    except ImportError:
        return set()
    try:
        root = psutil.Process(root_pid)
        return {root.pid} | {child.pid for child in root.children(recursive=True)}
    except Exception:
        return set()


def _memory_bytes(pids: Collection[int], limit: int | None = None) -> int | None:
    """Memory of the processes `pids`; None where it cannot be read.

    The sum of RSS (from /proc/PID/statm: O(1), nothing is walked) is what the poll reads;
    it counts pages that forked workers share with their parent once per process, so only
    when it goes over `limit` is it confirmed with PSS (smaps_rollup walks the page tables:
    milliseconds for a large process, and it contends for the process's memory map -- polled
    every 0.2 s it slowed a small training loop by 10-30 %)."""
    if not os.path.isdir("/proc"):
        return _memory_psutil(pids)
    rss = sum(_process_rss(pid) for pid in pids)
    if limit is None or rss <= limit:
        return rss
    return sum(_process_memory(pid) for pid in pids)


def _process_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _process_memory(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _memory_psutil(pids: Collection[int]) -> int | None:
    try:
        import psutil  # optional, for macOS
    except ImportError:
        return None
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except Exception:
            continue
    return total or None


def _kill(pid: int, started: int | None) -> bool:
    """SIGKILL `pid` if it is still the live process that started at `started` (clock ticks since boot; None:
    unchecked); whether it was.  Through a pidfd where there is one, so that the number cannot pass to
    another process between the check and the kill."""
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError:  # a kernel before 5.3: unchecked between the check and the kill
            pass
    try:
        if started is not None:
            stat = process_stat(pid)
            if stat is None or stat[0] in (b"Z", b"X") or int(stat[19]) != started:
                return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


_SUPERVISOR = Path(__file__).resolve().with_name("supervisor.py")


class _Supervised:
    """The program, started and held by its supervisor (``supervisor.py``, which documents what they say
    to each other): lintloop's end of it."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path | None, timeout: float,
                 namespace: bool) -> None:
        """Start the supervisor and, through it, `command` (in a PID namespace of its own where `namespace` and
        Linux allow it); raise OSError where the program could not start."""
        ours, theirs = socket.socketpair()
        mode = "namespace" if namespace else "tree"
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_SUPERVISOR), str(theirs.fileno()), mode, *command], env=env,
                cwd=str(cwd) if cwd else None, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=(theirs.fileno(),), start_new_session=True)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self._control = ours
        self._unread = b""
        self._said: dict[str, Any] = {}  # what the supervisor has said, by key
        self._closed = False  # the supervisor has closed its end: it is gone
        deadline = time.monotonic() + timeout
        while "started" not in self._said:
            problem = self._said.get("error") or (
                "the probe's supervisor ended" if self._closed else
                "the probe's supervisor did not start it in time" if time.monotonic() > deadline else None)
            if problem is not None:
                self.end()
                self.process.stdout.close()
                self.process.stderr.close()
                raise OSError(problem)
            self._listen(deadline - time.monotonic())

    @property
    def pid(self) -> int:
        """The main process's number (in a namespace, the number it has there)."""
        return self._said["started"]

    @property
    def supervisor(self) -> int:
        """The number of the supervisor's process that holds the program (in a namespace: its init)."""
        return self._said["supervisor"]

    @property
    def in_namespace(self) -> bool:
        """Whether the program runs in a PID namespace of its own (then its numbers are not the system's)."""
        return "namespace" in self._said

    @property
    def containment(self) -> str:
        """What keeps the program's processes in the run's reach (``ProbeRun.containment``)."""
        if self.in_namespace:
            return "pid namespace"
        why_not = self._said.get("no_namespace")
        return "process tree" + (f" (no PID namespace: {why_not})" if why_not else "")

    @property
    def lost(self) -> str | None:
        """How the supervisor's process that held the program ended before it could end the run, if it did."""
        return self._said.get("lost")

    @property
    def returncode(self) -> int | None:
        """The main process's exit status (negative: the signal that killed it); None while it runs, or
        where the supervisor went before it could say."""
        return self._said.get("returncode")

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the main process to end; whether it has (or the supervisor, and
        with it any news of the program, is gone)."""
        deadline = time.monotonic() + timeout
        while "returncode" not in self._said and not self._closed:
            if time.monotonic() >= deadline:
                return False
            self._listen(deadline - time.monotonic())
        return True

    def end(self) -> list[dict]:
        """Have the supervisor kill every process in its tree, then reap it; return the processes besides the
        main one that were still running (``describe_process``)."""
        try:
            self._control.shutdown(socket.SHUT_WR)  # the end of the run, for the supervisor
        except OSError:
            pass
        deadline = time.monotonic() + END_S + 5
        while not self._closed and time.monotonic() < deadline:
            self._listen(deadline - time.monotonic())
        self._control.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a supervisor that hangs does not hold lintloop up
            self.process.kill()
            self.process.wait()
        return self._said.get("left_running", [])

    def _listen(self, timeout: float) -> None:
        """Take in what the supervisor says within `timeout` seconds."""
        if self._closed or not select.select([self._control], [], [], max(timeout, 0))[0]:
            return
        data = self._control.recv(65536)
        if not data:
            self._closed = True
            return
        *lines, self._unread = (self._unread + data).split(b"\n")
        for line in lines:
            try:
                self._said.update(json.loads(line))
            except ValueError:  # a line cut short where a supervisor's process was killed as it wrote
                continue


def _end_run(program: _Supervised, processes: _Run) -> list[dict]:
    """Kill every process of the run that is still running; return those besides the main process
    (``describe_process``).  The supervisor kills its tree; then what the run's group and token find
    out of it (and what was in it just before, where it could not keep the orphans) is killed, again
    until a scan finds none left (a process can fork between a scan and its kill), for at most `END_S`
    seconds."""
    candidates = processes.pids()
    # (Where the supervisor lost the process that held the program, the main process is among those it killed.)
    left = {process["pid"]: process for process in program.end() if process["pid"] != program.pid}
    deadline = time.monotonic() + END_S
    while True:
        killed = False
        for pid, started in {**candidates, **processes.pids(descendants=False)}.items():
            description = describe_process(pid) if pid not in left else None  # a killed process's is gone
            if _kill(pid, started):
                killed = True
                if pid != program.pid or program.in_namespace:
                    left.setdefault(pid, description or {"pid": pid, "t": None, "command": None})
        if not killed or time.monotonic() > deadline:
            return list(left.values())
        candidates = {}
        time.sleep(0.02)


def run_probe(script: Path, argv: list[str], *, steps: int = 50, timeout: float = 120,
              device: str = "auto", python: str | None = None,
              memory_limit_mb: int | None = 8192, sample_every: int = 1,
              extra_env: dict | None = None, cwd: Path | None = None,
              live_steps: list[int] | None = None, tail_chars: int = TAIL_CHARS,
              namespace: bool = True, changes: bool = True) -> ProbeRun:
    """Run `python SCRIPT ARGV` under the probe and return its events and outcome.

    A notebook (`.ipynb`) runs as its code cells' program, in `cwd` (default: the notebook's
    directory), which is also put on `sys.path`; its locations are given by cell (see the module's
    documentation). Raises NotebookError for a notebook that cannot be read or is not Python.

    steps: stop the program cleanly after this many training steps (0: no cap).
    device: "cpu" hides GPUs (CUDA_VISIBLE_DEVICES=""); "auto" leaves the environment as it is;
        "cuda" makes GPUs visible (an empty CUDA_VISIBLE_DEVICES inherited from the caller is
        dropped), and the child reports whether it sees CUDA (a `device` event).
    python: the interpreter to run (default: this one); it needs the frameworks, not lintloop.
    memory_limit_mb: kill the process tree when its memory goes over this (None: no limit).
    sample_every: emit a `step` event (memory sample) every this many steps.
    cwd: working directory of the child (default: ours, like a normal run).
    live_steps: steps at which to count live tensors besides the last one (default [10]).
    tail_chars: how much of the end of stdout and stderr to keep (the pipes keep at most 256 KiB).
    namespace: run the program in a PID namespace of its own where Linux allows it (False: in the
        supervisor's process tree only; see ``supervisor.py`` for what each holds).
    changes: find what the program changed in files (``ProbeRun.file_changes``; ``changes.py``).
    """
    script = Path(script)
    options = {"steps": steps, "timeout": timeout, "device": device, "python": python,
               "memory_limit_mb": memory_limit_mb, "sample_every": sample_every, "live_steps": live_steps,
               "tail_chars": tail_chars, "namespace": namespace, "changes": changes}
    if not is_notebook(script.name):
        return _run_script(script, argv, extra_env=extra_env, cwd=cwd, **options)
    program = NotebookProgram.read(script)
    home = Path(cwd) if cwd is not None else script.resolve().parent
    env = dict(extra_env or {})
    inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(home), inherited) if p)  # as Jupyter: its directory
    directory = Path(tempfile.mkdtemp(prefix="lintloop-notebook-"))
    try:
        written = program.write_script(directory)
        run = _run_script(written, argv, extra_env=env, cwd=home, **options)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    program.locate(run.events, written)
    run.notebook = program
    return run


def _run_script(script: Path, argv: list[str], *, steps: int, timeout: float, device: str, python: str | None,
                memory_limit_mb: int | None, sample_every: int, extra_env: dict | None, cwd: Path | None,
                live_steps: list[int] | None, tail_chars: int, namespace: bool, changes: bool) -> ProbeRun:
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, not {device!r}")
    boot = bootstrap_dir()
    workdir = Path(tempfile.mkdtemp(prefix="lintloop-probe-"))
    events_path = workdir / "events.jsonl"
    config = {"events": str(events_path), "steps": int(steps or 0), "device": device,
              "sample_every": max(1, int(sample_every)),
              "live_steps": list(live_steps) if live_steps is not None else [10]}
    env = dict(os.environ)
    env.pop("LINTLOOP_PROBE_ROOT_PID", None)
    if extra_env:
        env.update({k: str(v) for k, v in extra_env.items()})
    env["PYTHONPATH"] = os.pathsep.join(
        [str(boot)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["LINTLOOP_PROBE_CONFIG"] = json.dumps(config)
    token = uuid.uuid4().hex
    env[_RUN_VAR] = token
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif device == "cuda" and not env.get("CUDA_VISIBLE_DEVICES", "x").strip():
        env.pop("CUDA_VISIBLE_DEVICES")
    command = [python or sys.executable, str(script), *[str(a) for a in argv]]
    folder = os.path.realpath(cwd if cwd is not None else os.getcwd())
    listed = Listing.take(folder, skipped=[str(workdir)]) if changes else None

    start = time.monotonic()
    timed_out = killed_for_memory = False
    peak = 0
    try:
        program = _Supervised(command, env, cwd, timeout, namespace)
    except OSError as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        return ProbeRun([], None, False, False, "", f"could not start {command[0]}: {exc}",
                        0.0, command)
    processes = _Run.of(token, program)
    out, err = _Tail(program.process.stdout), _Tail(program.process.stderr)
    out.start()
    err.start()
    limit = memory_limit_mb * 1024 * 1024 if memory_limit_mb else None
    try:
        while not program.wait(_POLL_S):
            if time.monotonic() - start > timeout:
                timed_out = True
                break
            if limit is not None:
                used = _memory_bytes(processes.pids(), limit)
                if used is not None:
                    peak = max(peak, used)
                    if used > limit:
                        killed_for_memory = True
                        break
    finally:  # whatever is left of the run (the program, its workers, daemons it started) goes
        left_running = _end_run(program, processes)
        # With every process that held the pipes gone, they close; one out of our reach (the supervisor could
        # not keep it, and it dropped the run's token and left the group) cannot hold us up for long.
        out.join(END_S)
        err.join(END_S)
    duration = time.monotonic() - start
    events = read_events(events_path) + [{"type": "left_running", **process} for process in left_running]
    found = None
    if changes:
        found = file_changes(listed, Listing.take(folder, skipped=[str(workdir)]) if listed is not None else None,
                             events, folder)
    shutil.rmtree(workdir, ignore_errors=True)
    return ProbeRun(
        events=events,
        returncode=program.returncode,
        timed_out=timed_out,
        killed_for_memory=killed_for_memory,
        stdout_tail=_tail(out.text(), tail_chars),
        stderr_tail=_tail(strip_framework_noise(err.text()), tail_chars),
        duration=duration,
        command=command,
        peak_memory_mb=round(peak / 2**20, 1) if peak else None,
        memory_limit_mb=memory_limit_mb,
        left_running=len(left_running),
        output_bytes=out.total + err.total,
        containment=program.containment,
        lost_supervisor=program.lost,
        file_changes=found,
    )
