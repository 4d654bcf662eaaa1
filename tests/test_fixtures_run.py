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
    ("LL401_module_strategy_bad", "tensorflow", ["--steps", "2"], 1, ["AssertionError"]),
    ("LL401_module_strategy_good", "tensorflow", ["--steps", "2"], 0, ["replicas in sync: 2"]),
    # The two-module package: run as `python -m crossmodule.<script>` (relative imports).
    ("crossmodule.train_numpy_bad", "tensorflow", ["--steps", "3"], 1,
     ["None gradients: 4/4", "No gradients provided for any variable"]),
    ("crossmodule.train_numpy_good", "tensorflow", ["--steps", "3"], 0, ["None gradients: 0/4"]),
    ("crossmodule.train_scope_bad", "tensorflow", ["--steps", "3"], 1, ["AssertionError"]),
    ("crossmodule.train_scope_good", "tensorflow", ["--steps", "3"], 0, ["replicas in sync: 2"]),
    ("LL402_bad", "tensorflow", ["--steps", "2"], 0, ["replicas=2 update/single-device ratio=2.00"]),
    ("LL402_good", "tensorflow", ["--steps", "2"], 0, ["replicas=2 update/single-device ratio=1.00"]),
    ("LL105_bad", "torch", ["--steps", "3"], 1,
     ["RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn"]),
    ("LL105_good", "torch", ["--steps", "3"], 0, ["step 3: loss="]),
    ("LL303_bad", "torch", ["--steps", "3"], 0, ["step 3: loss="]),
    ("LL303_good", "torch", ["--steps", "3"], 0, ["step 3: loss="]),
    ("LL604_bad", "torch", ["--steps", "3"], 0, ["step 1: loss=0.7344 grad_norm=2.9e+04", "step 2: loss=nan"]),
    ("LL604_good", "torch", ["--steps", "3"], 0, ["step 2: loss=0.7083"]),
    ("LL604_update_bad", "torch", ["--steps", "3"], 1,
     ["step 1: loss=0.7344 scale=65536", "RuntimeError: step() has already been called since the last update()."]),
    ("LL604_update_good", "torch", ["--steps", "3"], 0, ["step 3: loss=", "scale=65536"]),
    ("LL604_clip_bad", "torch", ["--steps", "3"], 0, ["step 1: loss=0.7344 grad_norm=2.9e+04"]),
    ("LL604_clip_good", "torch", ["--steps", "3"], 0, ["step 1: loss=0.7344 grad_norm=0.4425"]),
    ("LL605_bad", "torch", ["--steps", "2"], 0, ["step 1: loss=0.08549 zero_grad_fraction=0.0041"]),
    ("LL605_good", "torch", ["--steps", "2"], 0, ["step 1: loss=0.08549 zero_grad_fraction=0.0000"]),
    ("LL701_bad", "torch", ["--steps", "3"], 0, ["step 3: loss=12.6296 grad_norm=10.620"]),
    ("LL701_good", "torch", ["--steps", "3"], 0, ["step 3: loss=13.2882 grad_norm=4.482"]),
    ("LL702_bad", "torch", ["--steps", "2"], 0, ["step 1: loss=10.4336 grad_norm=11.737"]),
    ("LL702_good", "torch", ["--steps", "2"], 0, ["step 1: loss=10.4336 grad_norm=2.934"]),
    ("LL706_bad", "torch", ["--steps", "3"], 0, ["step 3: loss=0.7386 weight[0,0]=-0.008335"]),
    ("LL706_good", "torch", ["--steps", "3"], 0, ["step 1: loss=0.7179 weight[0,0]=0.001665"]),
    ("LL706_step_first_bad", "torch", ["--steps", "2"], 0,
     ["step 1: loss=0.7179 weight[0,0]=-0.008335", "step 2: loss=0.6977 weight[0,0]=0.001665"]),
    ("LL706_step_first_good", "torch", ["--steps", "2"], 0, ["step 1: loss=0.7179 weight[0,0]=0.001665"]),
    ("LL707_bad", "torch", ["--steps", "8"], 0,
     ["Detected call of `lr_scheduler.step()` before `optimizer.step()`", "epoch 0: lr=0.05"]),
    ("LL707_good", "torch", ["--steps", "8"], 0, ["epoch 0: lr=0.1", "epoch 1: lr=0.05"]),
    ("LL302_bad", "torch", ["--steps", "20", "--log-every", "10"], 0, ["step 20: mean loss", "done: 20 steps"]),
    ("LL302_good", "torch", ["--steps", "20", "--log-every", "10"], 0, ["step 20: mean loss", "done: 20 steps"]),
    ("LL403_bad", "torch", ["--steps", "16"], 0,
     ["epoch 0: first batch sample ids [172, 55, 225, 105, 47, 214, 183, 140]",
      "epoch 1: first batch sample ids [172, 55, 225, 105, 47, 214, 183, 140]"]),
    ("LL403_good", "torch", ["--steps", "16"], 0,
     ["epoch 0: first batch sample ids [172, 55, 225, 105, 47, 214, 183, 140]",
      "epoch 1: first batch sample ids [37, 180, 88, 157, 119, 177, 247, 162]"]),
    ("LL404_bad", "torch", ["--steps", "5"], 0,
     ["after 5 steps on 2 ranks: largest parameter difference between ranks 0.053588"]),
    ("LL404_good", "torch", ["--steps", "5"], 0,
     ["after 5 steps on 2 ranks: largest parameter difference between ranks 0.000000"]),
    ("LL505_bad", "torch", ["--steps", "4"], 0, ["validation order same in every epoch: False"]),
    ("LL505_good", "torch", ["--steps", "4"], 0, ["validation order same in every epoch: True"]),
    ("LL603_bad", "torch", ["--steps", "10"], 0,
     ["FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated",
      "FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated", "step 10: loss 0.6834 (amp off)"]),
    ("LL603_good", "torch", ["--steps", "10"], 0, ["step 10: loss 0.6834 (amp off)"]),
    ("LL703_bad", "torch", ["--steps", "5", "--val-batches", "10"], 0, ["10 batches, collected logits have grad_fn: True"]),
    ("LL703_good", "torch", ["--steps", "5", "--val-batches", "10"], 0,
     ["10 batches, collected logits have grad_fn: False"]),
    ("LL704_bad", "torch", ["--steps", "16"], 0, ["epoch 1: training with model.training=False"]),
    ("LL704_good", "torch", ["--steps", "16"], 0, ["epoch 1: training with model.training=True"]),
    ("LL705_bad", "torch", ["--steps", "3"], 0, ["hook calls: 0 of 3 steps"]),
    ("LL705_good", "torch", ["--steps", "3"], 0, ["hook calls: 3 of 3 steps"]),
    ("LL708_bad", "torch", ["--steps", "20"], 0, ["step 1: gradient norm of the first layer 0.05301"]),
    ("LL708_good", "torch", ["--steps", "20"], 0, ["step 1: gradient norm of the first layer 0.25075"]),
    ("LL801_bad", "torch", ["--steps", "40"], 0, ["resumed run matches the uninterrupted run: False"]),
    ("LL801_good", "torch", ["--steps", "40"], 0, ["resumed run matches the uninterrupted run: True"]),
    ("LL203_bad", "tensorflow", ["--steps", "20"], 0, ["final loss 0.1321", "train step ran eagerly: every op"]),
    ("LL203_good", "tensorflow", ["--steps", "20"], 0, ["final loss 0.1321"]),
    ("LL202_bad", "tensorflow", ["--steps", "20"], 0, ["history has 1 entries after 20 steps"]),
    ("LL202_good", "tensorflow", ["--steps", "20"], 0, ["history has 20 entries after 20 steps"]),
    ("LL204_bad", "tensorflow", ["--steps", "20"], 0, ["20 traces for 20 calls", "triggered tf.function retracing"]),
    ("LL204_good", "tensorflow", ["--steps", "20"], 0, ["1 traces for 20 calls"]),
    ("LL205_bad", "tensorflow", ["--steps", "20"], 0, ["20 traces for 20 calls", "triggered tf.function retracing"]),
    ("LL205_good", "tensorflow", ["--steps", "20"], 0, ["1 traces for 20 calls"]),
    ("LL302_tf_bad", "tensorflow", ["--steps", "20", "--log-every", "10"], 0,
     ["step 20: loss 1.3784", "20 host copies of the loss"]),
    ("LL302_tf_good", "tensorflow", ["--steps", "20", "--log-every", "10"], 0,
     ["step 20: loss 1.3784", "2 host copies of the loss"]),
    ("LL304_bad", "tensorflow", ["--steps", "5"], 0, ["persistent tapes alive when step 5 started: 1"]),
    ("LL304_good", "tensorflow", ["--steps", "5"], 0, ["persistent tapes alive when step 5 started: 0"]),
    ("LL602_bad", "tensorflow", ["--steps", "2"], 0, ["gradient entries exactly zero: 12917 of 214016"]),
    ("LL602_good", "tensorflow", ["--steps", "2"], 0, ["gradient entries exactly zero: 958 of 214016"]),
    ("LL602_lso_bad", "tensorflow", ["--steps", "2"], 0, ["output-bias update / SGD update: 3.052e-05"]),
    ("LL602_lso_good", "tensorflow", ["--steps", "2"], 0, ["output-bias update / SGD update: 1"]),
    ("LL501_bad", "tensorflow", ["--steps", "20"], 0, ["input and training ran one after the other"]),
    ("LL501_good", "tensorflow", ["--steps", "20"], 0, ["trained 20 steps"]),
    ("LL502_bad", "tensorflow", ["--steps", "16"], 0, ["map ran one call at a time"]),
    ("LL502_good", "tensorflow", ["--steps", "16"], 0, ["trained 16 steps"]),
    ("LL503_bad", "tensorflow", ["--steps", "12"], 0, ["in order, classes [0]"]),
    ("LL503_good", "tensorflow", ["--steps", "12"], 0, ["not consecutive"]),
    ("LL504_bad", "tensorflow", ["--steps", "12"], 0, ["first batch identical in all 3 epochs: True"]),
    ("LL504_good", "tensorflow", ["--steps", "12"], 0, ["first batch identical in all 3 epochs: False"]),
    ("LL601_bad", "tensorflow", ["--steps", "40"], 0,
     ["final loss 0.2558",
      "saturated float16 output: 22 of 256 rows have a probability of exactly 1.0, 2 probabilities are exactly 0"]),
    ("LL601_good", "tensorflow", ["--steps", "40"], 0, ["final loss 0.2558"]),
    ("LL708_keras_bad", "tensorflow", ["--steps", "40"], 0,
     ["received `from_logits=True`, but the `output` argument was produced by a Softmax activation",
      "loss per epoch: 1.5001 1.2799 1.1377 1.0273 0.9354"]),
    ("LL708_keras_good", "tensorflow", ["--steps", "40"], 0,
     ["loss per epoch: 1.5001 1.2799 1.1377 1.0273 0.9354", "accuracy 0.656"]),
    ("LL709_bad", "tensorflow", ["--steps", "80"], 0,
     ["final loss 1.3809 (ln 4 = 1.3863), accuracy 0.316, logits in [-8.68, 0.22]"]),
    ("LL709_good", "tensorflow", ["--steps", "80"], 0,
     ["final loss 0.6038 (ln 4 = 1.3863), accuracy 0.816, logits in [-5.40, 4.39]"]),
    ("LL803_bad", "tensorflow", ["--steps", "20"], 0, ["loss nan at step 3; check_numerics raised nothing"]),
    ("LL803_good", "tensorflow", ["--steps", "20"], 0, ["check_numerics raised at step 3", "Tensor had NaN values"]),
    ("LL803_keras_bad", "tensorflow", ["--steps", "16"], 0,
     ["weights hold NaN: True; check_numerics raised nothing"]),
    ("LL803_keras_good", "tensorflow", ["--steps", "16"], 0, ["check_numerics raised:", "loss : Tensor had NaN values"]),
    ("LL104_bad", "tensorflow", ["--steps", "10"], 0,
     ["Calling GradientTape.gradient on a persistent tape inside its context", "final losses"]),
    ("LL104_good", "tensorflow", ["--steps", "10"], 0, ["final losses"]),
    ("LL801_tf_bad", "tensorflow", ["--steps", "10"], 0,
     ["optimizer iterations 0", "resumed run matches the uninterrupted run: False"]),
    ("LL801_tf_good", "tensorflow", ["--steps", "10"], 0,
     ["optimizer iterations 20", "resumed run matches the uninterrupted run: True"]),
    ("LL802_bad", "tensorflow", ["--steps", "10"], 0, ["summary values written: 0"]),
    ("LL802_good", "tensorflow", ["--steps", "10"], 0, ["summary values written: 10"]),
]

# LL201: does the print inside the tf.function run on every call?
PRINT_EVERY_CALL = {"LL201_bad": False, "LL201_good": True}


def _require(framework):
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")


def _run(fixture, argv):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    program = ["-m", fixture] if "." in fixture else [str(FIXTURES / f"{fixture}.py")]  # a package's module
    return subprocess.run(
        [sys.executable, *program, *argv],
        capture_output=True, text=True, timeout=180, env=env, cwd=str(FIXTURES),
    )


def _describe(proc):
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"


def test_every_fixture_is_in_the_table():
    on_disk = {p.stem for p in FIXTURES.glob("LL*.py")}
    on_disk |= {f"{p.parent.name}.{p.stem}" for p in FIXTURES.glob("*/*_bad.py")}
    on_disk |= {f"{p.parent.name}.{p.stem}" for p in FIXTURES.glob("*/*_good.py")}
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
