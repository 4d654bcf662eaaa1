"""`lintloop probe FILE [-- ARGS]`: run a script (or a notebook's code cells) under the probe and report
what happened."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import IO, Any

from rich.markup import escape

from lintloop import terminal
from lintloop.config import load_settings
from lintloop.finding import Finding
from lintloop.linter import lint_bytes
from lintloop.notebook import NotebookError
from lintloop.output import output_target, write_report
from lintloop.runtime_probe.changes import LISTED_MAX
from lintloop.runtime_probe.correlate import probeable, report_pages
from lintloop.runtime_probe.runner import ProbeRun, run_probe
from lintloop.runtime_probe.verdicts import Summary, describe_dropped, replicas, sample_interval, verdict

EXIT_CLEAN, EXIT_PROBLEMS, EXIT_ERROR = 0, 1, 2


def probe_command(args: argparse.Namespace, script_args: list[str]) -> int:
    path = Path(args.file)
    if not path.is_file():
        print(f"lintloop: error: {terminal.printable(args.file)}: no such file", file=sys.stderr)
        return EXIT_ERROR
    root = None
    if args.output:  # said before the run: an --output that cannot be written
        root = load_settings().root  # the project, whose links `--output` does not follow
        output_target(args.output, root)
    pages = report_pages() if args.report is not None else None
    findings = _static_findings(path) if pages is not None else []  # a bad configuration stops us before the run
    steps = args.steps or 100
    try:
        run = run_probe(path, script_args, steps=steps, timeout=args.timeout, device=args.device,
                        python=args.python, memory_limit_mb=args.memory_limit, sample_every=sample_interval(steps))
    except NotebookError as exc:
        print(f"lintloop: error: {terminal.printable(f'{args.file}: {exc}')}", file=sys.stderr)
        return EXIT_ERROR
    summary = Summary.from_events(run.events, run.returncode, run.timed_out or run.killed_for_memory)
    page = None
    if pages is not None:
        for finding in findings:
            if probeable(finding):
                finding.probe = verdict(finding.code, summary)
        page = pages.write_report(args.report, str(path), [pages.ProgramRun("program", run)], findings)
    if args.output:
        write_report(lambda stream: _render(args.format, path, run, summary, stream, is_file=True, page=page),
                     args.output, root)
    else:
        write_report(lambda stream: _render(args.format, path, run, summary, stream, is_file=False, page=page))
    if run.returncode is None or run.timed_out or run.killed_for_memory:
        return EXIT_ERROR
    problems = (run.signal_name is not None or summary.none_gradients or summary.errors or summary.trace_prints
                or summary.per_replica_means or (summary.memory is not None and summary.memory.grows))
    return EXIT_PROBLEMS if problems else EXIT_CLEAN


def _static_findings(path: Path) -> list[Finding]:
    """The findings `check` reports for the file, under the configuration that applies to it."""
    settings = load_settings(start=path.resolve().parent)
    return lint_bytes(str(path), path.read_bytes(), settings.ruleset_for(path), path=path).findings


def describe_outcome(run: ProbeRun) -> str:
    """How the program ended: "exit 0", "timed out", "killed: over the memory limit (... MB)", "killed by SIGSEGV"."""
    if run.timed_out:
        return "timed out"
    if run.killed_for_memory:
        return f"killed: over the memory limit ({run.peak_memory_mb} MB > {run.memory_limit_mb} MB)"
    if run.signal_name is not None:
        return f"killed by {run.signal_name}"
    if run.lost_supervisor is not None:
        return f"stopped: {run.lost_supervisor} (the program can signal it where Linux gives it no PID namespace)"
    if run.returncode is None:  # (the program could not start: the supervisor said why)
        return "did not run: " + (run.stderr_tail.strip().splitlines() or ["the probe's supervisor ended"])[-1]
    return f"exit {run.returncode}"


def describe_containment(run: ProbeRun) -> list[str]:
    """What the probe had to clean up after the program, and what the program changed in files."""
    lines = []
    if run.left_running:
        lines.append(f"processes: {run.left_running} still running at the end of the program, killed")
        for process in run.of_type("left_running")[:_FILES_SHOWN]:
            lines.append(f"  pid {process['pid']}: {_shown_command(process.get('command'))}")
    by_change: dict[str, list[str]] = {}
    for change in run.files():
        by_change.setdefault(change["change"], []).append(_shown_change(change))
    for how in _CHANGES:
        paths = by_change.get(how, [])
        if paths:
            more = f", and {len(paths) - _FILES_SHOWN} more" if len(paths) > _FILES_SHOWN else ""
            lines.append(f"files ({how}): {', '.join(paths[:_FILES_SHOWN])}{more}")
    found = run.file_changes
    if found is not None and found.total > len(found.changes):
        lines.append(f"files: {found.total:,} changes, of which the JSON report lists the first {len(found.changes):,}")
    if found is not None and not found.listed:
        lines.append(f"files: the working folder holds more than {LISTED_MAX:,} entries and was not compared: "
                     "only the paths the program's Python code named were")
    if found is not None and found.unfollowed:
        lines.append("files: a process made more file calls than the probe follows: changes outside the working "
                     "folder may be missing")
    return lines


_FILES_SHOWN = 5
_ARGUMENT_SHOWN = 80  # characters of one argument of a leftover process's command line
_ARGUMENTS_SHOWN = 8
_CHANGES = ("created", "deleted", "modified", "replaced", "renamed")


def _shown_change(change: dict[str, Any]) -> str:
    """One change of `ProbeRun.files`, short: a folder with a slash, what it holds, what it was."""
    shown = _shown_entry(change["path"], change["kind"])
    if change.get("to"):
        shown += " -> " + _shown_entry(change["to"], change["kind"])
    if change.get("entries"):
        shown += f" (and {change['entries']:,} entries in it)"
    if change.get("was"):
        shown += f" (a {change['was']}, now a {change['kind']})"
    return shown


def _shown_entry(path: str, kind: str) -> str:
    return _shown_path(path) + ("/" if kind == "directory" else "")


def _shown_command(argv: list[str] | None) -> str:
    """A leftover process's command line, short enough for one line: a long argument keeps its start and
    its end (the interpreter and the script's name are what identify it), the argument list its head."""
    if not argv:
        return "?"
    half = (_ARGUMENT_SHOWN - 1) // 2
    shown = [arg if len(arg) <= _ARGUMENT_SHOWN else f"{arg[:half]}…{arg[-half:]}" for arg in argv[:_ARGUMENTS_SHOWN]]
    more = f" … ({len(argv) - _ARGUMENTS_SHOWN} more)" if len(argv) > _ARGUMENTS_SHOWN else ""
    return shlex.join(shown) + more


def _shown_path(path: str) -> str:
    """`path` relative to the working directory when it lies inside it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def _render(fmt: str, path: Path, run: ProbeRun, summary: Summary, stream: IO[str], is_file: bool,
            page: Path | None) -> None:
    if fmt == "json":
        result = {"file": str(path), "command": run.command, "returncode": run.returncode,
                  "timed_out": run.timed_out, "killed_for_memory": run.killed_for_memory,
                  "duration_s": round(run.duration, 3), "summary": summary.to_json(), "events": run.events,
                  "stderr_tail": run.stderr_tail, "signal": run.signal_name,
                  "memory_limit_mb": run.memory_limit_mb, "peak_memory_mb": run.peak_memory_mb,
                  "left_running": run.left_running, "output_bytes": run.output_bytes, "files": run.files(),
                  "files_compared": run.file_changes.to_json() if run.file_changes is not None else None,
                  "containment": run.containment, "lost_supervisor": run.lost_supervisor}
        if run.notebook is not None:
            result["notebook"] = run.notebook.to_json()
        if page is not None:
            result["report"] = str(page)
        json.dump(result, stream, indent=2)
        stream.write("\n")
        return
    console = terminal.console(stream, is_file)
    stop = " (step cap reached)" if summary.stop_reason == "step_limit" else ""
    outcome = terminal.printable(describe_outcome(run))
    console.print(f"[bold]{escape(terminal.printable(str(path)))}[/bold]: {escape(outcome)} after {summary.steps} "
                  f"step(s){stop}, {run.duration:.1f} s")
    for line in describe_summary(summary, path.name) + describe_containment(run):
        console.print("  " + escape(terminal.printable(line)))
    not_run = describe_dropped(run.notebook.to_json() if run.notebook is not None else None)
    if not_run:
        console.print("  notebook: " + escape(terminal.printable(not_run)))
    if run.returncode not in (0, None) and run.stderr_tail and not summary.errors:
        console.print("  program output (stderr, last lines):")
        tail = terminal.printable_lines(run.stderr_tail.strip()).splitlines()[-8:]
        console.print("\n".join("    " + line for line in tail), markup=False)
    if page is not None:
        console.print(f"  report: {terminal.printable(str(page))}", markup=False, highlight=False)


def describe_summary(summary: Summary, name: str) -> list[str]:
    """The observations of a run, one line each, most important first."""
    lines = []
    for event in summary.errors:
        lines.append(f"error: {event.get('exc_type')}: {event.get('message')}  ({event_location(event, name)})")
    for event in summary.none_gradients:
        lines.append(f"gradients: {event.get('none', 0)} None, {event.get('zero', 0)} all-zero of "
                     f"{event.get('total')} ({event.get('framework')}, step {event.get('step')}; "
                     f"{event_location(event, name)})")
    for function, counts in sorted(summary.functions.items()):
        lines.append(f"tf.function {function}: {counts['traces']} trace(s), {counts['calls']} call(s)")
    for event in summary.trace_prints[:3]:
        lines.append(f"print while tracing {event.get('function')}: {event.get('text')!r}  "
                     f"({event_location(event, name)})")
    if summary.strategy:
        lines.append(f"strategy: {summary.strategy.get('strategy')} with "
                     f"{replicas(summary.strategy)} replica(s)")
    for event in summary.per_replica_means[:1]:
        lines.append(f"per-replica reduce_mean of per-example {event.get('loss')} losses  "
                     f"({event_location(event, name)})")
    if summary.memory is not None:
        m = summary.memory
        lines.append(f"memory ({summary.mem_source}): median {m.median_increase / 1024:+.2f} KiB/step, "
                     f"{m.positive_fraction:.0%} of steps grow, {m.total_growth / 1024:+.1f} KiB over "
                     f"{m.samples} samples — {'GROWS' if m.grows else 'no per-step growth'}")
    live = summary.live_tensor_growth()
    if live is not None:
        lines.append(f"live tensors: {live[0]:+d} over {live[1]} steps")
    for event in summary.params_unchanged[:1]:
        lines.append(f"parameters unchanged by step {event.get('step')}  ({event_location(event, name)})")
    for event in summary.warnings[:5]:
        lines.append(f"warning: {event.get('category')}: {event.get('message')}  ({event_location(event, name)})")
    return lines or ["nothing observed"]


def event_location(event: dict[str, Any], name: str) -> str:
    """Where an event happened: "train.py:12", in a notebook "train.ipynb:cell 7:12"."""
    file = Path(str(event.get("file", "?"))).name
    if not file:
        return name
    cell = f"cell {event['cell']}:" if event.get("cell") is not None else ""
    return f"{file}:{cell}{event.get('line', '?')}"
