"""`--report DIR`: an HTML page per probed program, drawing what the probe measured.

The page has a header (the file, the commands, how each run ended, for a notebook the IPython lines
that did not run, the file's static findings with their verdicts) and charts of the probe's events:
memory in use per step, tf.function traces per call and JAX compiles per jit call site, and the global
gradient norm per sampled step; for the flagged program and its fixed copy on the same axes (`check
--probe`), or for the one program (`probe`).  A chart without data is replaced by one line saying why.  Plotly draws the charts
offline: its JavaScript is written once into DIR, beside the pages, and never fetched.
"""

from __future__ import annotations

import html
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from lintloop.cache import read_regular, write_atomically
from lintloop.finding import Finding
from lintloop.runtime_probe.cli import describe_outcome, describe_summary, event_location
from lintloop.runtime_probe.runner import ProbeRun
from lintloop.runtime_probe.verdicts import DROPPED_SHOWN, Summary, describe, step_series

PLOTLY_JS = "plotly.min.js"

# What each `mem_source` of the `step` events measures (runtime_probe/bootstrap/_lintloop_probe/memory.py).
MEMORY_SOURCES = {
    "mallinfo2": "host heap in use (glibc mallinfo2)",
    "mallinfo": "host heap in use (glibc mallinfo)",
    "mstats": "host heap in use (macOS mstats)",
    "rss": "host resident set size (RSS)",
    "cuda": "CUDA allocator (torch.cuda.memory_allocated)",
    "tf_gpu": "TensorFlow GPU:0 allocator",
}
HOST_MEMORY = "host heap in use"
# The flagged run in red, its fixed copy in green and dashed (where both runs measure the same,
# as gradient norms of a leak do, the flagged line shows through), a lone `probe` run in blue.
COLOURS = {"flagged program": "#d62728", "fixed program": "#2ca02c", "program": "#1f77b4"}
DASHES = {"fixed program": "dash"}
_HEIGHT = 420


@dataclass
class ProgramRun:
    """One run drawn on the page, named by `label` ("flagged program", "fixed program", "program")."""

    label: str
    run: ProbeRun
    summary: Summary = field(init=False)

    def __post_init__(self) -> None:
        self.summary = Summary.from_events(self.run.events, self.run.returncode,
                                           self.run.timed_out or self.run.killed_for_memory)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return self.summary.of_type(kind)


@dataclass
class Chart:
    """A figure, or the reason there is none."""

    title: str
    figure: go.Figure | None = None
    missing: str | None = None


def _figure(title: str, x_title: str, y_title: str) -> go.Figure:
    figure = go.Figure()
    figure.update_layout(title=title, xaxis_title=x_title, yaxis_title=y_title, template="plotly_white",
                         height=_HEIGHT, showlegend=True, legend={"orientation": "h", "y": -0.2})
    return figure


def _line(label: str, **style: Any) -> dict[str, Any]:
    return {"color": COLOURS.get(label, COLOURS["program"]), "dash": DASHES.get(label, "solid"), **style}


def _memory_source(summary: Summary) -> str:
    return MEMORY_SOURCES.get(str(summary.mem_source), str(summary.mem_source))


def memory_chart(runs: list[ProgramRun]) -> Chart:
    """Bytes in use at each memory sample, as KiB above the run's first sample, runs on one axis."""
    sources = {_memory_source(p.summary) for p in runs if p.summary.mem_source}
    title = "Memory in use per step" + (f": {sources.pop()}" if len(sources) == 1 else "")
    figure = _figure(title, "training step", "KiB above the first sample")
    for program in runs:
        source = _memory_source(program.summary)
        # With a device source (CUDA), the host heap beside it: autograd's graph nodes live there.
        for key, name, style in (("mem", source, {}), ("host_mem", HOST_MEMORY, {"dash": "dot", "width": 1})):
            series = step_series(program.run.events, key)
            if not series:
                continue
            first = series[0][1]
            figure.add_scatter(x=[n for n, _ in series], y=[(value - first) / 1024 for _, value in series],
                               customdata=[value for _, value in series], mode="lines+markers",
                               name=f"{program.label}: {name}", line=_line(program.label, **style),
                               marker={"size": 4},
                               hovertemplate="step %{x}: %{y:+.1f} KiB (%{customdata:,} bytes in use)"
                                             "<extra>%{fullData.name}</extra>")
    if not figure.data:
        return Chart(title, missing="no memory samples: the probe counted no training step in this run")
    return Chart(title, figure)


def tf_function_chart(runs: list[ProgramRun]) -> Chart:
    """Traces so far at each call of each tf.function (a step line up to its last call)."""
    title = "tf.function traces per call"
    figure = _figure(title, "call", "traces so far")
    for program in runs:
        calls = {e.get("function"): int(e.get("calls") or 0) for e in program.of_type("tf_function")}
        traced: dict[str, list[tuple[int, int]]] = {}
        for event in program.of_type("trace"):
            traced.setdefault(str(event.get("function")), []).append((int(event["call"]), int(event["traces"])))
        for function, points in sorted(traced.items()):
            last_call = calls.get(function, points[-1][0])
            if last_call > points[-1][0]:  # no retrace after the last trace: the line goes on flat
                points = [*points, (last_call, points[-1][1])]
            figure.add_scatter(x=[c for c, _ in points], y=[t for _, t in points], mode="lines+markers",
                               line=_line(program.label, shape="hv"),
                               name=f"{program.label}: {function}")
    if not figure.data:
        return Chart(title, missing="no tf.function was traced in this run")
    return Chart(title, figure)


def jax_compile_chart(runs: list[ProgramRun]) -> Chart:
    """Backend compiles per jit call site (traces in the hover), one bar per run."""
    title = "JAX compiles per jit call site"
    figure = _figure(title, "call site", "compiles")
    for program in runs:
        sites = program.of_type("jax_compile_site")
        if not sites:
            continue
        figure.add_bar(x=[f"{e.get('function')} ({event_location(e, '?')})" for e in sites],
                       y=[int(e.get("compiles") or 0) for e in sites],
                       customdata=[int(e.get("traces") or 0) for e in sites],
                       hovertemplate="%{x}: %{y} compile(s), %{customdata} trace(s)<extra>%{fullData.name}</extra>",
                       name=program.label, marker_color=_line(program.label)["color"])
    if not figure.data:
        return Chart(title, missing="no jax.jit call was compiled in this run")
    figure.update_layout(barmode="group")
    return Chart(title, figure)


def gradient_norm_chart(runs: list[ProgramRun]) -> Chart:
    """The global L2 norm of the gradients at each sampled step."""
    title = "Gradient norm per step (global L2 norm, at each memory sample)"
    figure = _figure(title, "training step", "gradient norm")
    for program in runs:
        series = step_series(program.run.events, "grad_norm")
        if series:
            figure.add_scatter(x=[n for n, _ in series], y=[norm for _, norm in series], mode="lines+markers",
                               name=program.label, line=_line(program.label), marker={"size": 4})
    if not figure.data:
        return Chart(title, missing="no gradient norms in this run: the probe measures them at PyTorch optimizer "
                                    "steps and eager tf.GradientTape.gradient calls")
    return Chart(title, figure)


def charts(runs: list[ProgramRun]) -> list[Chart]:
    """The page's charts, in order."""
    return [memory_chart(runs), tf_function_chart(runs), jax_compile_chart(runs), gradient_norm_chart(runs)]


def page_name(display: str) -> str:
    """The page's file name: the file's path as shown, made one safe name (tests/a.py -> tests_a.py.html)."""
    return re.sub(r"[^\w.-]+", "_", display).strip("_.") + ".html"


def write_report(directory: Path, display: str, runs: list[ProgramRun], findings: list[Finding]) -> Path:
    """Write the page of one probed file (and plotly's JavaScript, once) into `directory`. Each file is
    written whole and renamed into place: a symbolic link a working tree put there under its name is
    replaced, never followed (`write_atomically`)."""
    directory.mkdir(parents=True, exist_ok=True)
    plotly_js = get_plotlyjs().encode("utf-8")
    page = directory / page_name(display)
    folder = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        if read_regular(folder, PLOTLY_JS, len(plotly_js) + 1) != plotly_js:  # absent, or another version's
            write_atomically(folder, PLOTLY_JS, plotly_js)
        write_atomically(folder, page.name, render_page(display, runs, findings).encode("utf-8"))
    finally:
        os.close(folder)
    return page


def notebook_section(notebook: dict[str, Any]) -> str:
    """What of the notebook ran (`NotebookProgram.to_json`): its cells, and the lines left out of the run."""
    escape = html.escape
    cells = ", ".join(str(c) for c in notebook["cells"])
    parts = [f"<h2>Notebook</h2><p>The code cells ran in order as one program (cells {escape(cells)}).</p>"]
    count = notebook["dropped_lines"]
    if count:
        rows = "".join(f"<tr><td>cell {d['cell']}:{d['line']}</td><td><code>{escape(d['text'])}</code></td></tr>"
                       for d in notebook["dropped"])
        hidden = count - len(notebook["dropped"])
        more = f"<p class='missing'>and {hidden} more</p>" if hidden else ""
        parts.append(f"<p>{count} line(s) of IPython syntax (magics, shell escapes, cells in another language) "
                     f"did not run:</p><table><tr><th>line</th><th>text</th></tr>{rows}</table>{more}")
    if notebook.get("stops_before_cell") is not None:
        parts.append(f"<p>Cell {notebook['stops_before_cell']} does not parse: the run stopped before it, as "
                     "Jupyter's Run All does.</p>")
    return "".join(parts)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { text-align: left; padding: 0.2em 0.8em 0.2em 0; vertical-align: top; }
code { font-size: 0.95em; }
.missing { color: #666; font-style: italic; }
"""


def render_page(display: str, runs: list[ProgramRun], findings: list[Finding]) -> str:
    """The page: the header (runs, static findings and their verdicts, observations), then the charts."""
    escape = html.escape
    rows = "".join(
        f"<tr><th>{escape(p.label)}</th><td><code>{escape(shlex.join(p.run.command))}</code></td>"
        f"<td>{escape(describe_outcome(p.run))} after {p.summary.steps} step(s)"
        f"{' (step cap reached)' if p.summary.stop_reason == 'step_limit' else ''}, {p.run.duration:.1f} s</td></tr>"
        for p in runs)
    parts = [f"<h1>lintloop probe report: <code>{escape(display)}</code></h1>",
             f"<table><tr><th>run</th><th>command</th><th>outcome</th></tr>{rows}</table>"]
    if not any(p.label == "fixed program" for p in runs) and any(p.label == "flagged program" for p in runs):
        parts.append("<p class='missing'>no fixed copy was run: none of the findings has a fix</p>")
    notebook = runs[0].run.notebook if runs else None
    if notebook is not None:
        parts.append(notebook_section(notebook.to_json(DROPPED_SHOWN)))
    parts.append("<h2>Static findings</h2>")
    if findings:
        parts.append("<table><tr><th>line</th><th>rule</th><th>message</th><th>verdict</th></tr>" + "".join(
            f"<tr><td>{'' if f.cell is None else f'cell {f.cell}:'}{f.line}:{f.column}</td>"
            f"<td>{escape(f.code)} {escape(f.name)}</td>"
            f"<td>{escape(f.message)}</td><td>{escape(describe(f.probe) or 'not probed')}</td></tr>"
            for f in findings) + "</table>")
    else:
        parts.append("<p class='missing'>no findings</p>")
    parts.append("<h2>Observations</h2>")
    for program in runs:
        lines = "".join(f"<li>{escape(line)}</li>" for line in describe_summary(program.summary, Path(display).name))
        parts.append(f"<h3>{escape(program.label)}</h3><ul>{lines}</ul>")
    for chart in charts(runs):
        if chart.figure is None:
            parts.append(f"<h2>{escape(chart.title)}</h2><p class='missing'>{escape(str(chart.missing))}</p>")
            continue
        parts.append(chart.figure.to_html(full_html=False, include_plotlyjs=False,
                                          config={"displaylogo": False, "responsive": True}))
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>lintloop probe: {escape(display)}</title><style>{_STYLE}</style>"
            f"<script src='{PLOTLY_JS}' charset='utf-8'></script></head>\n<body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
