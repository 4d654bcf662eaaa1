"""Run every fixture program under tests/fixtures/ and check it shows its symptom (bad) or runs clean (good).

These tests need the real frameworks; a fixture is skipped when its framework is not
installed. The frameworks are never imported in the test process itself. A fixture script runs
under the probe (the run the probe's verdict tests read too); a fixture package's module runs
plainly with `-m`.
"""
import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES
from fixture_cases import CASES

pytestmark = pytest.mark.framework

# LL201: does the print inside the tf.function run on every call?
PRINT_EVERY_CALL = {"LL201_bad": False, "LL201_good": True}


def _require(framework):
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")


class _ModuleRun:
    """A fixture package's module run with `python -m` (the probe runs scripts)."""

    def __init__(self, module, argv):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
        proc = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True,
                              timeout=180, env=env, cwd=str(FIXTURES))
        self.returncode, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr

    def describe(self):
        return f"exit {self.returncode}\n--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}"


def test_every_fixture_is_in_the_table():
    on_disk = {p.stem for p in FIXTURES.glob("LL*.py")}
    on_disk |= {f"{p.parent.name}.{p.stem}" for p in FIXTURES.glob("*/*_bad.py")}
    on_disk |= {f"{p.parent.name}.{p.stem}" for p in FIXTURES.glob("*/*_good.py")}
    in_table = {case[0] for case in CASES}
    assert not on_disk - in_table, f"add these fixtures to CASES: {sorted(on_disk - in_table)}"
    assert not in_table - on_disk, f"fixtures listed in CASES but missing: {sorted(in_table - on_disk)}"


@pytest.mark.parametrize(
    "fixture, framework, argv, expected_rc, expected", CASES, ids=[case[0] for case in CASES])
def test_fixture_runs_with_expected_outcome(fixture, framework, argv, expected_rc, expected, fixture_probe_run):
    _require(framework)
    run = _ModuleRun(fixture, argv) if "." in fixture else fixture_probe_run(fixture, argv)
    output = run.stdout + run.stderr
    assert run.returncode == expected_rc, run.describe()
    for text in expected:
        assert text in output, f"missing {text!r}\n{run.describe()}"
    if fixture in PRINT_EVERY_CALL:
        _check_print_count(run, int(argv[argv.index("--steps") + 1]), PRINT_EVERY_CALL[fixture])


def _check_print_count(run, calls, prints_every_call):
    printed = [line for line in run.stdout.splitlines() if line.startswith("loss ")]
    if prints_every_call:
        assert len(printed) == calls, run.describe()
        assert all("Tensor(" not in line for line in printed), run.describe()
    else:
        # builtin print runs only while tracing: fewer lines than calls, showing a symbolic tensor
        assert 1 <= len(printed) < calls, run.describe()
        assert all(line.startswith('loss Tensor("') for line in printed), run.describe()
