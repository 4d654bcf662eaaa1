"""The probe runs a notebook's code cells as one program (issue 13): in the notebook's directory, IPython
lines not run and reported, every location given by cell, verdicts on the notebook's findings."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from conftest import FIXTURES
from lintloop.config import load_settings
from lintloop.linter import lint_bytes
from lintloop.runtime_probe.correlate import ProbeOptions, attach_verdicts, runnable
from lintloop.runtime_probe.runner import ProbeRun

NOTEBOOKS = FIXTURES / "notebooks"
STEPS = 60
# The setup cell, the `%%bash` cell and the `%%time` line of every fixture notebook (tests/notebook_fixtures.py).
FIXTURE_DROPPED = [{"cell": 3, "line": 1, "text": "%matplotlib inline"},
                   {"cell": 3, "line": 2, "text": "!pip install -q tqdm"},
                   {"cell": 3, "line": 3, "text": "gpus = !nvidia-smi -L"}]


def write_notebook(path: Path, *cells: str, language: str = "python") -> Path:
    """A notebook of these cells: code, or markdown where the text starts with `#`."""
    notebook = new_notebook(cells=[new_markdown_cell(c) if c.startswith("# ") else new_code_cell(c) for c in cells],
                            metadata={"kernelspec": {"name": language, "language": language, "display_name": language}})
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(path))
    return path


def cell_line(notebook: Path, cell: int, text: str) -> int:
    """The 1-based line of `cell` (1-based among all cells) that starts with `text`."""
    source = nbformat.read(str(notebook), as_version=4).cells[cell - 1].source
    [line] = [n for n, line in enumerate(source.splitlines(), 1) if line.strip().startswith(text)]
    return line


def needs_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")


def test_the_cells_run_in_order_in_the_notebooks_directory_without_their_ipython_lines(run_cli, tmp_path):
    project = tmp_path / "project"
    (project / "helper.py").parent.mkdir()
    (project / "helper.py").write_text("GREETING = 'hello'\n")
    (project / "data.txt").write_text("payload\n")
    notebook = write_notebook(
        project / "explore.ipynb",
        "# Exploring",
        "import helper\n!touch shell_marker\nfiles = !ls\n%env SEED=1",
        "%%bash\ntouch bash_marker",
        "with open('data.txt') as fh:\n    data = fh.read().strip()",
        "open('seen.txt', 'w').write(f'{helper.GREETING} {data} {files}')")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out, _ = run_cli("probe", notebook, "--format", "json", cwd=elsewhere)
    result = json.loads(out)
    assert code == 0, result["stderr_tail"]
    # A neighbour module imported, a relative path opened in the notebook's directory, the cells in order.
    assert (project / "seen.txt").read_text() == "hello payload None"
    assert not [p.name for p in tmp_path.rglob("*_marker")]  # neither the shell escape nor the %%bash cell ran
    assert result["notebook"]["dropped_lines"] == 5
    assert result["notebook"]["dropped"] == [
        {"cell": 2, "line": 2, "text": "!touch shell_marker"}, {"cell": 2, "line": 3, "text": "files = !ls"},
        {"cell": 2, "line": 4, "text": "%env SEED=1"}, {"cell": 3, "line": 1, "text": "%%bash"},
        {"cell": 3, "line": 2, "text": "touch bash_marker"}]
    assert result["notebook"]["cells"] == [2, 4, 5]

    code, out, _ = run_cli("probe", notebook, cwd=elsewhere)
    assert "notebook: 5 IPython line(s) not run (cell 2:2 `!touch shell_marker`, cell 2:3 `files = !ls`, " \
           "cell 2:4 `%env SEED=1`, …)" in out


def test_an_error_is_located_by_cell_in_text_and_json(run_cli, tmp_path):
    notebook = write_notebook(tmp_path / "broken_run.ipynb", "def fail():\n    raise ValueError('boom')",
                              "# Then the run", "x = 1\nfail()")
    code, out, _ = run_cli("probe", notebook, cwd=tmp_path)
    assert code == 1
    assert "error: ValueError: boom  (broken_run.ipynb:cell 1:2)" in out
    code, out, _ = run_cli("probe", notebook, "--format", "json", cwd=tmp_path)
    [error] = json.loads(out)["summary"]["errors"]
    assert (error["file"], error["cell"], error["line"]) == (str(notebook.resolve()), 1, 2)
    assert error["frames"] == [[str(notebook.resolve()), 2, "<module>", 3], [str(notebook.resolve()), 2, "fail", 1]]


def test_a_cell_that_does_not_parse_stops_the_run_before_it(run_cli, tmp_path):
    notebook = write_notebook(tmp_path / "typo.ipynb", "open('before.txt', 'w').close()", "def broken(:\n    pass",
                              "open('after.txt', 'w').close()")
    code, out, _ = run_cli("probe", notebook, "--format", "json", cwd=tmp_path)
    assert code == 0
    assert json.loads(out)["notebook"]["stops_before_cell"] == 2
    assert (tmp_path / "before.txt").exists() and not (tmp_path / "after.txt").exists()
    _, out, _ = run_cli("probe", notebook, cwd=tmp_path)
    assert "cell 2 does not parse: the run stopped before it" in out


def test_a_notebook_in_another_language_is_not_run(run_cli, tmp_path):
    notebook = write_notebook(tmp_path / "analysis.ipynb", "summary(cars)", language="R")
    code, out, err = run_cli("probe", notebook, cwd=tmp_path)
    assert code == 2 and not out
    assert "not a Python notebook" in err


def test_a_notebook_is_runnable_when_it_has_code(tmp_path):
    assert runnable((NOTEBOOKS / "LL301_bad.ipynb").read_text(), notebook=True)
    prose = write_notebook(tmp_path / "notes.ipynb", "# Only prose", "")
    assert not runnable(prose.read_text(), notebook=True)


def test_the_differential_run_is_the_notebook_with_its_findings_fixed(tmp_path):
    needs_torch()  # the finding is probed only where its framework is installed
    notebook = tmp_path / "LL301_bad.ipynb"
    shutil.copyfile(NOTEBOOKS / "LL301_bad.ipynb", notebook)
    findings = lint_bytes(notebook.name, notebook.read_bytes(), load_settings(start=tmp_path).ruleset_for(notebook),
                          path=notebook).findings
    runs: list[tuple[str, str, Path | None]] = []

    def record(script: Path, argv: list[str], cwd: Path | None = None, **options) -> ProbeRun:
        runs.append((Path(script).name, Path(script).read_text(), cwd))
        return ProbeRun([], 0, False, False, "", "", 0.1, ["python", str(script)])

    attach_verdicts(findings, {notebook.name: notebook}, ProbeOptions(steps=STEPS), run=record)
    (flagged_name, flagged, _), (fixed_name, fixed, fixed_cwd) = runs
    assert flagged_name == fixed_name == "LL301_bad.ipynb" and flagged == notebook.read_text()
    fixed_cell = nbformat.reads(fixed, as_version=4).cells[10].source
    assert "total_loss += loss.detach()" in fixed_cell and "total_loss += loss\n" not in fixed_cell
    assert fixed_cwd == tmp_path  # the fixed copy runs where the notebook runs


@pytest.mark.framework
def test_check_probe_confirms_a_notebooks_finding_and_its_fix(run_cli, tmp_path):
    needs_torch()
    notebook = tmp_path / "LL301_bad.ipynb"
    shutil.copyfile(NOTEBOOKS / "LL301_bad.ipynb", notebook)
    code, out, _ = run_cli("check", notebook.name, "--probe", "--probe-steps", STEPS, "--device", "cpu",
                           "--report", "report", "--format", "json", cwd=tmp_path)
    [finding] = json.loads(out)
    assert code == 1 and (finding["code"], finding["cell"]) == ("LL301", 11)
    evidence = finding["probe"]["evidence"]
    assert finding["probe"]["status"] == "confirmed" and evidence["signal"] == "memory_growth"
    assert evidence["fixed_program"] == "symptom gone"
    assert evidence["notebook"]["dropped_lines"] == 6 and evidence["notebook"]["dropped"] == FIXTURE_DROPPED
    page = Path(evidence["report"]).read_text()
    assert "<h2>Notebook</h2>" in page and "<td>cell 3:1</td><td><code>%matplotlib inline</code>" in page
    assert f"<td>cell 11:{finding['line']}:{finding['column']}</td>" in page


@pytest.mark.framework
def test_probe_events_of_a_notebook_name_its_cells(run_cli, tmp_path):
    needs_torch()
    notebook = tmp_path / "LL301_bad.ipynb"
    shutil.copyfile(NOTEBOOKS / "LL301_bad.ipynb", notebook)
    code, out, _ = run_cli("probe", notebook.name, "--steps", STEPS, "--device", "cpu", "--format", "json",
                           cwd=tmp_path)
    result = json.loads(out)
    assert code == 1 and result["summary"]["memory"]["grows"]
    steps = [e for e in result["events"] if e["type"] == "step"]
    assert len(steps) == STEPS
    assert {(e["file"], e["cell"], e["line"]) for e in steps} == {
        (str(notebook.resolve()), 11, cell_line(notebook, 11, "optimizer.step()"))}
    assert result["notebook"]["dropped"][:3] == FIXTURE_DROPPED
