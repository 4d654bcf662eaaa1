"""`--report DIR`: the HTML page per probed program (runtime_probe/report.py).

The fast tests build pages from synthetic probe events and compare the figures' data with the
events' series; the framework test probes tests/fixtures/LL301_bad.py and its fixed copy with
`check --probe --report` and renders the page in headless Chromium.
"""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs

from conftest import FIXTURES
from lintloop.config import load_settings
from lintloop.linter import lint_text
from lintloop.runtime_probe import report
from lintloop.runtime_probe.correlate import ProbeOptions, attach_verdicts
from lintloop.runtime_probe.runner import ProbeRun
from lintloop.runtime_probe.verdicts import describe

CHROMIUM = Path("/usr/bin/chromium")


def _probe_run(events: list[dict], command: str = "prog.py") -> ProbeRun:
    return ProbeRun(events=events, returncode=0, timed_out=False, killed_for_memory=False, stdout_tail="",
                    stderr_tail="", duration=1.5, command=["python", command])


def _steps(mems: list[int], pid: int = 1, source: str = "mallinfo2", **per_step: list) -> list[dict]:
    """`step` events 1..len(mems), with `mem` and any other per-step key (None values left out)."""
    events = []
    for index, mem in enumerate(mems):
        event = {"type": "step", "pid": pid, "n": index + 1, "kind": "optimizer_step", "mem": mem,
                 "mem_source": source}
        event.update({key: values[index] for key, values in per_step.items() if values[index] is not None})
        events.append(event)
    return events


LEAK = [1_000_000 + 7_000 * n for n in range(40)]
FLAT = [1_000_000 + (64 if n % 2 else 0) for n in range(40)]
NORMS = [1.0 + 0.5 * n for n in range(40)]


def _runs() -> list[report.ProgramRun]:
    norms_with_gap = list(NORMS)
    norms_with_gap[3] = None  # a non-finite norm: no point
    flagged = _steps(LEAK, grad_norm=norms_with_gap) + _steps([5, 6, 7], pid=2)  # a worker's shorter series
    fixed = _steps(FLAT, grad_norm=NORMS)
    return [report.ProgramRun("flagged program", _probe_run(flagged)),
            report.ProgramRun("fixed program", _probe_run(fixed))]


def test_memory_chart_draws_each_runs_samples_above_its_first():
    chart = report.memory_chart(_runs())
    assert chart.missing is None and "glibc mallinfo2" in chart.title
    flagged, fixed = chart.figure.data
    assert list(flagged.x) == list(range(1, 41))
    assert list(flagged.y) == [(mem - LEAK[0]) / 1024 for mem in LEAK]
    assert list(flagged.customdata) == LEAK
    assert list(fixed.y) == [(mem - FLAT[0]) / 1024 for mem in FLAT]
    assert flagged.name.startswith("flagged program") and fixed.name.startswith("fixed program")
    assert flagged.line.color != fixed.line.color


def test_memory_chart_draws_the_host_heap_beside_a_device_source():
    device = [2_000_000 + 1_024 * n for n in range(5)]
    host = [9_000_000 + 10_240 * n for n in range(5)]
    chart = report.memory_chart([report.ProgramRun("program", _probe_run(_steps(device, source="cuda",
                                                                                host_mem=host)))])
    assert "CUDA allocator" in chart.title
    on_device, on_host = chart.figure.data
    assert list(on_device.y) == [float(n) for n in range(5)]
    assert list(on_host.y) == [10.0 * n for n in range(5)] and "host heap" in on_host.name


def test_gradient_norm_chart_leaves_out_steps_without_a_finite_norm():
    flagged, fixed = report.gradient_norm_chart(_runs()).figure.data
    assert list(flagged.x) == [n for n in range(1, 41) if n != 4]
    assert list(flagged.y) == [norm for index, norm in enumerate(NORMS) if index != 3]
    assert list(fixed.y) == NORMS


def test_tf_function_chart_follows_the_trace_count_to_the_last_call():
    events = [{"type": "trace", "function": "train_step", "traces": 1, "call": 1},
              {"type": "trace", "function": "train_step", "traces": 2, "call": 4},
              {"type": "tf_function", "function": "train_step", "traces": 2, "calls": 10}]
    (line,) = report.tf_function_chart([report.ProgramRun("program", _probe_run(events))]).figure.data
    assert (list(line.x), list(line.y)) == ([1, 4, 10], [1, 2, 2])
    assert line.name == "program: train_step" and line.line.shape == "hv"


def test_jax_compile_chart_has_a_bar_per_call_site():
    sites = [{"type": "jax_compile_site", "function": "update", "file": "/x/train.py", "line": 12, "traces": 40,
              "compiles": 40},
             {"type": "jax_compile_site", "function": "loss", "file": "/x/train.py", "line": 30, "traces": 1,
              "compiles": 1}]
    (bars,) = report.jax_compile_chart([report.ProgramRun("flagged program", _probe_run(sites))]).figure.data
    assert list(bars.x) == ["update (train.py:12)", "loss (train.py:30)"]
    assert list(bars.y) == [40, 1] and list(bars.customdata) == [40, 1]


def test_charts_without_data_are_one_line_each(tmp_path):
    runs = [report.ProgramRun("program", _probe_run([]))]
    page = report.write_report(tmp_path, "empty.py", runs, []).read_text()
    for chart in report.charts(runs):
        assert chart.figure is None
        assert f"<p class='missing'>{chart.missing}</p>" in page
    assert "plotly-graph-div" not in page


def test_page_has_header_findings_and_offline_charts(tmp_path):
    script = FIXTURES / "LL301_bad.py"
    findings = lint_text("tests/fixtures/LL301_bad.py", script.read_text(), load_settings(start=FIXTURES).ruleset(),
                         path=script).findings
    findings[0].probe = {"status": "confirmed", "evidence": {"signal": "memory_growth", "memory": {
        "median_increase_bytes_per_step": 7000.0, "positive_fraction": 0.9}}}
    path = report.write_report(tmp_path / "out", "tests/fixtures/LL301_bad.py", _runs(), findings)
    page = path.read_text()
    assert path.name == "tests_fixtures_LL301_bad.py.html"
    assert "<code>python prog.py</code>" in page and "exit 0 after 40 step(s), 1.5 s" in page
    assert "LL301" in page and "probe: confirmed — memory grows 6.8 KiB/step" in page
    # The memory and gradient charts are drawn; tf.function and JAX have a line saying why not.
    assert page.count("class=\"plotly-graph-div\"") == 2
    assert "no tf.function was traced in this run" in page and "no jax.jit call was compiled" in page
    # Offline: plotly's JavaScript is written beside the page, once, and nothing is fetched.
    assert (tmp_path / "out" / report.PLOTLY_JS).read_text(encoding="utf-8") == get_plotlyjs()
    assert re.findall(r"<script src='([^']*)'", page) == [report.PLOTLY_JS]
    assert "https://" not in page.replace("https://plot.ly", "")


def test_links_a_working_tree_put_in_the_report_folder_are_replaced_not_followed(tmp_path):
    """`--report reports/` in a cloned repository that ships `reports/train.py.html` (and plotly's file)
    as links to a file of the user's: the pages replace the links; the file is untouched."""
    (tmp_path / "precious").write_text("keep me\n")
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "train.py.html").symlink_to(tmp_path / "precious")
    (folder / report.PLOTLY_JS).symlink_to(tmp_path / "precious")
    page = report.write_report(folder, "train.py", [report.ProgramRun("program", _probe_run([]))], [])
    assert (tmp_path / "precious").read_text() == "keep me\n"
    assert not page.is_symlink() and "<html" in page.read_text()
    assert (folder / report.PLOTLY_JS).read_text(encoding="utf-8") == get_plotlyjs()


def test_check_verdicts_name_the_page(tmp_path):
    # The runs are recorded ones, but `check --probe` first asks whether the program's framework is installed.
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: check --probe would skip the file before running it")
    script = FIXTURES / "LL301_bad.py"
    display = "tests/fixtures/LL301_bad.py"
    findings = lint_text(display, script.read_text(), load_settings(start=FIXTURES).ruleset(), path=script).findings
    runs = iter([_probe_run(_steps(LEAK)), _probe_run(_steps(FLAT))])
    options = ProbeOptions(report_dir=tmp_path / "pages")
    attach_verdicts(findings, {display: script}, options, run=lambda *args, **kwargs: next(runs))
    (finding,) = [f for f in findings if f.code == "LL301"]
    page = tmp_path / "pages" / "tests_fixtures_LL301_bad.py.html"
    assert finding.probe["status"] == "confirmed"
    assert finding.probe["evidence"]["report"] == str(page) and page.is_file()
    assert "fixed program" in page.read_text()
    assert str(page) not in describe(finding.probe)  # the text output names the page on its own line


def test_probe_command_writes_the_page_and_names_it(tmp_path, run_cli):
    script = tmp_path / "plain.py"
    script.write_text("print(sum(range(10)))\n")
    code, out, _ = run_cli("probe", script, "--report", tmp_path / "pages")
    page = tmp_path / "pages" / report.page_name(str(script))
    assert code == 0 and f"report: {page}" in out
    assert "no memory samples" in page.read_text()
    code, out, _ = run_cli("probe", script, "--report", tmp_path / "pages", "--format", "json")
    assert json.loads(out)["report"] == str(page)


def _rendered_dom(page: Path, profile: Path) -> str:
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
               "--virtual-time-budget=10000", "--dump-dom", page.resolve().as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout


@pytest.mark.framework
def test_check_probe_report_renders_both_runs_in_chromium(tmp_path, run_cli):
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent: the page cannot be rendered (CI installs chromium)")
    pages = tmp_path / "pages"
    code, out, err = run_cli("check", "--probe", "--report", pages, "--format", "json", "--no-cache",
                             FIXTURES / "LL301_bad.py")
    (finding,) = [f for f in json.loads(out) if f["code"] == "LL301"]
    assert finding["probe"]["status"] == "confirmed", (out, err)
    page = Path(finding["probe"]["evidence"]["report"])
    dom = _rendered_dom(page, tmp_path / "chromium")
    assert dom.count('class="main-svg"') >= 4  # plotly's SVG layers, for the memory and gradient charts
    # A line per run on each chart, with a point per sampled step (the probe's 100 steps, each sampled).
    traces = dom.split('<g class="trace scatter')[1:]
    assert len(traces) == 4
    assert all('class="js-line" d="M' in trace and len(re.findall(r'class="point[ "]', trace)) == 100
               for trace in traces)
    legend = re.findall(r'class="legendtext"[^>]*>([^<]+)<', dom)
    assert legend == ["flagged program: host heap in use (glibc mallinfo2)",
                      "fixed program: host heap in use (glibc mallinfo2)", "flagged program", "fixed program"]
