"""Start-up stays lazy: what a command imports decides how long a user waits for it (bench/startup.py
times it). `--version`, a `check` answered from the result cache, `rules --format json`'s parser and
the language server's `initialize` load neither libcst nor a rule (a worker imports them when it has
a file to analyse), and a file gets the same findings analysed as from the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
# Prints the command's exit code and which heavy modules it imported, as JSON on the last line.
PROBE = """
import json, sys
from lintloop.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
heavy = sorted(m for m in ("libcst", "lintloop.linter", "lintloop.rule", "lintloop.rules.autodiff", "rich.table",
                           "lintloop.runtime_probe.runner", "lsprotocol")
               if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def _imports(args: list[str], cwd: Path) -> tuple[int, list[str], str]:
    environment = dict(os.environ, NO_COLOR="1")
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True,
                          env=environment, timeout=120)
    *output, last = done.stdout.splitlines()
    result = json.loads(last)
    return result["code"], result["heavy"], "\n".join(output)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "lintloop.toml").write_text("")
    (tmp_path / "train.py").write_text((FIXTURES / "LL301_bad.py").read_text())
    return tmp_path


def test_version_imports_no_engine(project):
    code, heavy, output = _imports(["--version"], project)
    assert code == 0 and heavy == []
    assert output.startswith("lintloop ")


def test_a_check_answered_from_the_cache_imports_no_engine_and_reports_the_same(project):
    cold_code, cold_heavy, cold_output = _imports(["check", "train.py"], project)
    assert cold_code == 1 and "LL301" in cold_output and cold_heavy == []  # analysed in a worker
    warm_code, warm_heavy, warm_output = _imports(["check", "train.py"], project)
    assert (warm_code, warm_heavy, warm_output) == (1, [], cold_output)


def test_a_changed_file_is_analysed_again(project):
    _imports(["check", "train.py"], project)
    (project / "train.py").write_text((FIXTURES / "LL301_good.py").read_text())
    code, heavy, output = _imports(["check", "train.py"], project)
    assert code == 0 and "LL301" not in output


@pytest.mark.parametrize("options", [["--select", "LL3"], ["--extend-select", "unused-suppression"],
                                     ["--ignore", "LL301,LL2"], ["--select", "ALL"]])
def test_selection_reads_the_rule_index(project, options):
    """Selecting by code, prefix, name or ALL needs no rule class: a warm run with options stays lazy."""
    _imports(["check", *options, "train.py"], project)
    code, heavy, _ = _imports(["check", *options, "train.py"], project)
    assert heavy == []


def test_unknown_selector_is_refused_from_the_index(project):
    code, heavy, _ = _imports(["check", "--select", "LL999", "train.py"], project)
    assert code == 2 and heavy == []


def test_the_server_answers_initialize_before_loading_the_engine():
    """Everything the server process imports to start (lintloop.server.app); the engine is its workers'."""
    script = ("import sys, lintloop.server.app\n"
              "print(sorted(m for m in ('libcst', 'lintloop.linter', 'lintloop.rule') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"


def test_a_warm_directory_run_imports_the_engine_in_no_process(project):
    """Every file found in the cache or passed over: neither the parent nor a worker loads a rule."""
    for name in ("a", "b", "c", "d", "e", "f"):  # several files, all sent to workers (MAX_CHUNK = 0 below)
        (project / f"{name}.py").write_text((FIXTURES / "LL301_bad.py").read_text())
    (project / "plain.py").write_text("x = 1\n")
    probe = ("import sys, lintloop.runner as runner\n"
             "run = runner.run_job\n"
             "def watched(job):\n"
             "    result = run(job)\n"
             "    if 'libcst' in sys.modules:\n"
             "        result.errors.append('libcst imported by ' + job.display)\n"
             "    return result\n"
             "runner.run_job = watched\n"
             "runner.MAX_CHUNK = 0  # every file to a worker\n"
             "from lintloop.cli import main\n"
             "sys.exit(main(['check', '.']))\n")
    first = subprocess.run([sys.executable, "-c", probe], cwd=project, capture_output=True, text=True, timeout=120)
    assert first.returncode == 2 and "libcst imported by" in first.stderr  # analysed: a worker loads the engine
    warm = subprocess.run([sys.executable, "-c", probe], cwd=project, capture_output=True, text=True, timeout=120)
    assert warm.returncode == 1 and warm.stderr == "", warm.stderr
    assert "1 file without deep-learning code was not parsed" in warm.stdout


def test_a_check_dispatches_the_most_recently_modified_files_first(tmp_path):
    """In a warm run the files just edited are the ones to analyse: they start first; the results
    still come back in the order of the paths. Without a cache (fix, diff, `--no-cache`), the files
    go in the order of the paths: a package's modules together."""
    from dataclasses import replace

    from lintloop.cache import ResultCache
    from lintloop.runner import MAX_CHUNK, Job, run_jobs

    cache = ResultCache.open(tmp_path)
    assert cache is not None
    jobs = []
    for index in range(MAX_CHUNK + 3):  # more than the parent answers alone
        path = tmp_path / f"m{index:03}.py"
        path.write_text("x = 1\n")
        jobs.append(Job(str(path), path.name, ("LL001",), "{}", "check", cache_dir=str(cache.directory),
                        modified_ns=index))
    seen: list[str] = []
    results = run_jobs(jobs, 1, on_result=lambda result: seen.append(result.display))
    assert seen == [job.display for job in reversed(jobs)]
    assert [result.display for result in results] == [job.display for job in jobs]
    for uncached in ([replace(job, mode="diff", cache_dir=None) for job in jobs], [replace(job, cache_dir=None) for job in jobs]):
        seen.clear()
        run_jobs(uncached, 1, on_result=lambda result: seen.append(result.display))
        assert seen == [job.display for job in jobs]


def test_a_small_run_of_files_without_deep_learning_code_starts_no_worker(tmp_path, monkeypatch):
    import lintloop.runner as runner

    def no_pool(*args, **kwargs):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(runner, "WorkerPool", no_pool)
    jobs = []
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("x = 1\n")
        jobs.append(runner.Job(str(tmp_path / name), name, ("LL001", "LL301"), "{}", "check", explicit=False))
    assert [(r.display, r.passed_over) for r in runner.run_jobs(jobs, 2)] == [("a.py", True), ("b.py", True)]


@pytest.mark.parametrize(("args", "started"), [(["check", "--no-cache", "--jobs", "2", "."], 2),
                                               (["fix", "--jobs", "2", "."], 2),
                                               (["check", "--jobs", "2", "."], 0),  # a warm run may need no engine
                                               (["check", "--no-cache", "--jobs", "2", "a.py"], 0)])  # files named
def test_without_a_cache_a_directory_run_starts_its_workers_before_finding_the_files(project, args, started):
    """The workers import the engine while the parent walks the directories (a cold run's start-up)."""
    (project / "a.py").write_text((FIXTURES / "LL301_bad.py").read_text())
    probe = ("import multiprocessing, sys, lintloop.cli as cli\n"
             "find = cli._discover\n"
             "def watched(*args):\n"
             "    print('workers while finding:', len(multiprocessing.active_children()))\n"
             "    return find(*args)\n"
             "cli._discover = watched\n"
             f"sys.exit(cli.main({args!r}))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=project, capture_output=True, text=True, timeout=120)
    assert f"workers while finding: {started}\n" in done.stdout, done.stdout + done.stderr
