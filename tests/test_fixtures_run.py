"""Run every fixture program under tests/fixtures/ and check it shows its symptom (bad) or runs clean (good).

These tests need the real frameworks; a fixture is skipped when its framework is not
installed. The frameworks are never imported in the test process itself.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"

pytestmark = pytest.mark.framework

# (fixture, framework, extra argv, expected exit code, substrings expected in stdout+stderr)
CASES = [
    ("LL101_bad", "tensorflow", ["--steps", "2"], 1,
     ["None gradients: 4/4", "ValueError: No gradients provided for any variable."]),
    ("LL101_good", "tensorflow", ["--steps", "2"], 0, ["None gradients: 0/4"]),
    ("LL102_bad", "tensorflow", ["--steps", "2"], 1,
     ["None gradients: 4/4", "ValueError: No gradients provided for any variable."]),
    ("LL102_good", "tensorflow", ["--steps", "2"], 0, ["None gradients: 0/4"]),
    ("LL102_torch_bad", "torch", ["--steps", "2"], 1,
     ["RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn"]),
    ("LL102_torch_good", "torch", ["--steps", "2"], 0, ["step 1: loss="]),
    ("LL103_bad", "tensorflow", ["--steps", "2"], 1,
     ["input gradient is None",
      "ValueError: Attempt to convert a value (None) with an unsupported type (<class 'NoneType'>) to a Tensor."]),
    ("LL103_good", "tensorflow", ["--steps", "2"], 0, ["step 1: input gradient is ok"]),
    ("LL201_bad", "tensorflow", ["--steps", "6"], 0,
     ['loss Tensor("', "train_step called 6 times"]),
    ("LL201_good", "tensorflow", ["--steps", "6"], 0, ["train_step called 6 times"]),
    ("LL301_bad", "torch", ["--steps", "30"], 0, ["done: 30 steps"]),
    ("LL301_good", "torch", ["--steps", "30"], 0, ["done: 30 steps"]),
    ("LL301_tf_bad", "tensorflow", ["--steps", "30"], 0, ["done: 30 steps"]),
    ("LL301_tf_good", "tensorflow", ["--steps", "30"], 0, ["done: 30 steps"]),
    ("LL401_bad", "tensorflow", ["--steps", "2"], 1,
     ["RuntimeError: Mixing different tf.distribute.Strategy objects"]),
    ("LL401_good", "tensorflow", ["--steps", "2"], 0, ["replicas in sync: 2"]),
    ("LL402_bad", "tensorflow", ["--steps", "2"], 0, ["replicas=2 update/single-device ratio=2.00"]),
    ("LL402_good", "tensorflow", ["--steps", "2"], 0, ["replicas=2 update/single-device ratio=1.00"]),
]

# LL201: does the print inside the tf.function run on every call?
PRINT_EVERY_CALL = {"LL201_bad": False, "LL201_good": True}


def _require(framework):
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")


def _run(fixture, argv):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, str(FIXTURES / f"{fixture}.py"), *argv],
        capture_output=True, text=True, timeout=180, env=env, cwd=str(FIXTURES),
    )


def _describe(proc):
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"


def test_every_fixture_is_in_the_table():
    on_disk = {p.stem for p in FIXTURES.glob("LL*.py")}
    in_table = {case[0] for case in CASES}
    assert not on_disk - in_table, f"add these fixtures to CASES: {sorted(on_disk - in_table)}"
    assert not in_table - on_disk, f"fixtures listed in CASES but missing: {sorted(in_table - on_disk)}"


@pytest.mark.parametrize(
    "fixture, framework, argv, expected_rc, expected", CASES, ids=[case[0] for case in CASES])
def test_fixture_runs_with_expected_outcome(fixture, framework, argv, expected_rc, expected):
    _require(framework)
    proc = _run(fixture, argv)
    output = proc.stdout + proc.stderr
    assert proc.returncode == expected_rc, _describe(proc)
    for text in expected:
        assert text in output, f"missing {text!r}\n{_describe(proc)}"
    if fixture in PRINT_EVERY_CALL:
        _check_print_count(proc, int(argv[argv.index("--steps") + 1]), PRINT_EVERY_CALL[fixture])


def _check_print_count(proc, calls, prints_every_call):
    printed = [line for line in proc.stdout.splitlines() if line.startswith("loss ")]
    if prints_every_call:
        assert len(printed) == calls, _describe(proc)
        assert all("Tensor(" not in line for line in printed), _describe(proc)
    else:
        # builtin print runs only while tracing: fewer lines than calls, showing a symbolic tensor
        assert 1 <= len(printed) < calls, _describe(proc)
        assert all(line.startswith('loss Tensor("') for line in printed), _describe(proc)
