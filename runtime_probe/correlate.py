"""`lintloop check --probe`: run each file that has probe-able findings and attach a verdict to each.

A notebook is probed as the program of its code cells (`runner.run_probe`); its findings and the
probe's events are both given by cell, and each verdict's evidence says which IPython lines did not run.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from lintloop.config import ConfigError
from lintloop.finding import Finding
from lintloop.linter import apply_edits, fix_notebook
from lintloop.notebook import Notebook, NotebookError, is_notebook
from lintloop.rule import RuleSet
from lintloop.runtime_probe.runner import ProbeRun, bootstrap_dir, run_probe
from lintloop.runtime_probe.verdicts import DROPPED_SHOWN, Summary, sample_interval, verdict
from lintloop.rules import BY_CODE
from lintloop.source import SourceText

_FRAMEWORK_MODULES = {"tf": "tensorflow", "pt": "torch", "jax": "jax"}


@dataclass
class ProbeOptions:
    steps: int = 100
    timeout: float = 300
    device: str = "auto"
    python: str | None = None
    memory_limit_mb: int | None = 8192
    argv: tuple[str, ...] = ()
    report_dir: Path | None = None  # write an HTML page per probed program here


def probeable(finding: Finding) -> bool:
    rule = BY_CODE.get(finding.code)
    return rule is not None and rule.probe != "—"


def runnable(text: str, notebook: bool = False) -> bool:
    """A script, not a library module: an `if __name__ == "__main__":` block or top-level code.

    A notebook (`notebook`: `text` is the .ipynb file's) is always a script: runnable when it has code
    in a Python kernel's cells."""
    if notebook:
        try:
            parsed = Notebook.parse(text)
        except NotebookError:
            return False
        return parsed.python and any(cell.source.strip() for cell in parsed.cells)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    inert = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
             ast.AnnAssign, ast.Pass)
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test):
            return True
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # docstring
        if not isinstance(node, inert):
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and any(
                isinstance(n, ast.Call) for n in ast.walk(node.value)):
            return True  # `model = build()` at top level runs code
    return False


class _FrameworkCheck:
    """Which frameworks the probe interpreter can import (asked once per run, without importing them)."""

    def __init__(self, python: str | None) -> None:
        self.python = python or sys.executable
        self._known: dict[str, bool] = {}

    def available(self, module: str) -> bool:
        if module not in self._known:
            code = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
            try:
                self._known[module] = subprocess.run([self.python, "-c", code], capture_output=True,
                                                     timeout=60).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                self._known[module] = False
        return self._known[module]


def attach_verdicts(findings: list[Finding], paths: dict[str, Path], options: ProbeOptions,
                    run: Callable[..., ProbeRun] = run_probe) -> None:
    """Set `finding.probe` for every probe-able finding: one run per file (and one of its fixed copy).

    With `options.report_dir`, each probed file also gets an HTML page there, named in its verdicts'
    evidence as `report`."""
    write_page = _page_writer(options.report_dir)
    frameworks = _FrameworkCheck(options.python)
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        # A finding in a module not linted itself (found through a script that imports it) has no
        # program of its own to run.
        if probeable(finding) and finding.path in paths:
            by_file.setdefault(finding.path, []).append(finding)
    for display, file_findings in by_file.items():
        path = paths[display]
        text = SourceText.from_bytes(path.read_bytes()).text
        reason = _skip_reason(text, is_notebook(path.name), file_findings, frameworks, options)
        if reason:
            for finding in file_findings:
                finding.probe = {"status": "skipped", "evidence": {"reason": reason}}
            continue
        flagged_run = run(path, list(options.argv), **_run_options(options))
        summary = _summarize(flagged_run)
        fixed_run = _probe_fixed_copy(path, text, file_findings, options, run)
        fixed = _summarize(fixed_run) if fixed_run is not None else None
        for finding in file_findings:
            finding.probe = verdict(finding.code, summary, fixed)
            if fixed is not None and finding.fix is not None and finding.probe["status"] == "confirmed":
                again = verdict(finding.code, fixed)
                finding.probe["evidence"]["fixed_program"] = (
                    "symptom gone" if again["status"] != "confirmed" else "symptom still present")
            if flagged_run.notebook is not None:
                finding.probe["evidence"]["notebook"] = flagged_run.notebook.to_json(DROPPED_SHOWN)
        if write_page is not None:
            page = write_page(display, flagged_run, fixed_run, [f for f in findings if f.path == display])
            for finding in file_findings:
                finding.probe["evidence"]["report"] = str(page)


def report_pages() -> ModuleType:
    """`runtime_probe.report`, which needs plotly (the `probe` extra): imported only for `--report`."""
    try:
        from lintloop.runtime_probe import report
    except ImportError as exc:
        raise ConfigError(f"--report: the HTML report needs plotly ({exc}): pip install 'lintloop[probe]'") from exc
    return report


def _page_writer(directory: Path | None) -> Callable[[str, ProbeRun, ProbeRun | None, list[Finding]], Path] | None:
    """What writes a probed file's page into `directory` (None: no report asked for)."""
    if directory is None:
        return None
    report = report_pages()

    def write(display: str, flagged: ProbeRun, fixed: ProbeRun | None, findings: list[Finding]) -> Path:
        runs = [report.ProgramRun("flagged program", flagged)]
        if fixed is not None:
            runs.append(report.ProgramRun("fixed program", fixed))
        return report.write_report(directory, display, runs, findings)

    return write


def _run_options(options: ProbeOptions) -> dict[str, Any]:
    return {"steps": options.steps, "sample_every": sample_interval(options.steps),
            "timeout": options.timeout, "device": options.device,
            "python": options.python, "memory_limit_mb": options.memory_limit_mb,
            "changes": False}  # (verdicts need no report of the files a program changed)


def _summarize(run: ProbeRun) -> Summary:
    return Summary.from_events(run.events, run.returncode, run.timed_out or run.killed_for_memory)


def _skip_reason(text: str, notebook: bool, findings: list[Finding], frameworks: _FrameworkCheck,
                 options: ProbeOptions) -> str | None:
    if not runnable(text, notebook):
        return ("not runnable: no code in a Python kernel's cells" if notebook
                else "not runnable: no `if __name__ == \"__main__\":` block or top-level code")
    needed = {fw for f in findings for fw in BY_CODE[f.code].frameworks}
    modules = [_FRAMEWORK_MODULES[fw] for fw in sorted(needed)]
    used = [m for m in modules if m in text]
    missing = [m for m in used if not frameworks.available(m)]
    if missing:
        return f"framework not installed in {frameworks.python}: {', '.join(missing)}"
    return None


def _probe_fixed_copy(path: Path, text: str, findings: list[Finding], options: ProbeOptions,
                      run: Callable[..., ProbeRun]) -> ProbeRun | None:
    """The differential run: the same program with the findings' fixes (safe and unsafe) applied.

    A notebook's fixes are applied to its cells as `lintloop fix --unsafe-fixes` applies them (the
    rules of the findings only); the fixed notebook runs where the original runs."""
    if not any(f.fix is not None for f in findings):
        return None
    if is_notebook(path.name):
        rules = RuleSet([BY_CODE[code] for code in sorted({f.code for f in findings if f.fix is not None})])
        outcome = fix_notebook(str(path), text, rules, unsafe=True, path=path)
        if not outcome.applied:
            return None
        fixed_text = outcome.text
    else:
        fixed_text = apply_edits(text, [e for f in findings if f.fix is not None for e in f.fix.edits])
    directory = Path(tempfile.mkdtemp(prefix="lintloop-fixed-"))
    try:
        fixed = directory / path.name
        fixed.write_text(fixed_text, encoding="utf-8")
        # The fixed copy imports its neighbours as the original does, and a notebook runs in its directory.
        pythonpath = os.pathsep.join(p for p in (str(bootstrap_dir()), str(path.resolve().parent),
                                                 os.environ.get("PYTHONPATH", "")) if p)
        home = {"cwd": path.resolve().parent} if is_notebook(path.name) else {}
        return run(fixed, list(options.argv), extra_env={"PYTHONPATH": pythonpath}, **home, **_run_options(options))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
