"""The probe's tf.function events (tf_function.py): steps counted through XLA-compiled train steps,
lists mutated while tracing (`trace_mutation`), Function objects built per iteration (`new_instances`),
retraces on Python numbers (`trace` args), and check_numerics that XLA dropped
(`check_numerics_bypassed`); and that each stays quiet on the correct shape beside it.

Runs real TensorFlow programs in child processes (CPU); skipped when tensorflow is not installed.
"""
import importlib.util
import textwrap
from pathlib import Path

import pytest

from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict
from conftest import events_of as _events, source_line as _line

pytestmark = pytest.mark.framework

HEADER = """
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
x = tf.constant(np.random.default_rng(0).normal(size=(16, 4)).astype("float32"))
y = tf.reduce_sum(x, axis=1, keepdims=True)
model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(0.01)
"""


@pytest.fixture(autouse=True)
def _tensorflow():
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow is not installed")


def _script(tmp_path, body, steps=0):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(HEADER).lstrip() + textwrap.dedent(body))
    run = run_probe(path, [], steps=steps, device="cpu", timeout=300)
    assert not run.timed_out and not _events(run, "error"), run.stderr_tail
    return path, run


def _function(run, name):
    [summary] = [e for e in _events(run, "tf_function") if e["function"] == name]
    return summary


def test_xla_compiled_train_steps_are_counted(tmp_path):
    # The step counter must see calls of a jit_compile=True step whose trace computed gradients,
    # decorated or wrapped, as well as plain ones.
    _, run = _script(tmp_path, """
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        xla_step = tf.function(step, jit_compile=True)
        for i in range(20):
            xla_step(x, y)
    """, steps=12)
    steps = _events(run, "step")
    [stop] = _events(run, "stop")
    assert stop["reason"] == "step_limit" and stop["steps"] == 12
    assert {e["kind"] for e in steps} == {"tf_function_call"} and not any(e.get("fallback") for e in steps)
    assert _function(run, "step")["trains"] is True


def test_keras_fit_with_jit_compile_counts_steps_and_sees_trace_time_effects(tmp_path):
    path, run = _script(tmp_path, """
        class Net(tf.keras.Model):
            def __init__(self):
                super().__init__()
                self.dense = tf.keras.layers.Dense(1)
                self.batch_losses = []
            def call(self, x):
                return self.dense(x)
            def train_step(self, data):
                xb, yb = data
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((self(xb, training=True) - yb) ** 2)
                    loss = tf.debugging.check_numerics(loss, "keras loss")
                self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
                self.batch_losses.append(loss)
                return {"loss": loss}
        net = Net()
        net.compile(optimizer="sgd", jit_compile=True)
        labels = y.numpy()
        labels[8] = np.nan
        net.fit(x.numpy(), labels, batch_size=4, epochs=3, verbose=0, shuffle=False)
    """, steps=8)
    [stop] = _events(run, "stop")
    assert stop["steps"] == 8
    [mutation] = _events(run, "trace_mutation")
    assert mutation["line"] == _line(path, "self.batch_losses.append(loss)")
    # Keras traces the step twice (the first trace creates the optimizer's variables): 2 appends, 8 steps.
    assert mutation["times"] == 2 and mutation["calls"] == 8
    [bypassed] = _events(run, "check_numerics_bypassed")
    assert bypassed["line"] == _line(path, "loss = tf.debugging.check_numerics(loss")
    assert bypassed["message"] == "keras loss" and bypassed["step"] == 3


def test_trace_time_mutations_of_outside_lists_only(tmp_path):
    path, run = _script(tmp_path, """
        history = []
        @tf.function
        def outside(v):
            history.append(v * 2)
            return v
        @tf.function
        def local(v):
            parts = []
            for i in range(3):
                parts.append(v * i)
            return tf.add_n(parts)
        for i in range(5):
            outside(x)
            local(x)
    """)
    [mutation] = _events(run, "trace_mutation")
    assert mutation["line"] == _line(path, "history.append(v * 2)")
    assert (mutation["function"], mutation["times"], mutation["calls"]) == ("outside", 1, 5)
    assert verdict("LL202", Summary.from_events(run.events, run.returncode, run.timed_out))["status"] == "confirmed"


def test_functions_built_per_iteration_and_python_number_retraces(tmp_path):
    path, run = _script(tmp_path, """
        def double(v):
            return v * 2
        @tf.function
        def scaled(v, factor):
            return v * factor
        @tf.function
        def flagged(v, training):
            return v if training else -v
        for i in range(6):
            tf.function(double)(x)
            scaled(x, i)
            scaled(x, tf.constant(i, tf.float32))
            flagged(x, i % 2 == 0)
    """)
    assert _function(run, "double")["new_instances"] == 6
    assert _function(run, "scaled")["new_instances"] == 1
    traces = [e for e in _events(run, "trace") if e["function"] == "scaled"]
    assert [e["args"][1] for e in traces if e["args"][1] != "float32[]"] == [str(i) for i in range(6)]
    summary = Summary.from_events(run.events, run.returncode, run.timed_out)
    ll204 = verdict("LL204", summary)
    assert ll204["status"] == "confirmed" and ll204["evidence"]["functions"] == 6
    ll205 = verdict("LL205", summary)
    assert ll205["status"] == "confirmed" and ll205["evidence"]["function"] == "scaled"
    assert ll205["evidence"]["line"] == _line(path, "def scaled(v, factor):") - 1  # its decorator's line
    assert ll205["evidence"]["warning"] is None or "retracing" in ll205["evidence"]["warning"]


def test_check_numerics_is_reported_only_when_xla_let_a_nan_through(tmp_path):
    path, run = _script(tmp_path, """
        nan = tf.constant([1.0, float("nan")])
        finite = tf.constant([1.0, 2.0])
        @tf.function(jit_compile=True)
        def xla_checked(v):
            return tf.debugging.check_numerics(v, "xla") * 2
        @tf.function(jit_compile=True)
        def xla_finite(v):
            return tf.debugging.check_numerics(v, "finite") * 2
        @tf.function
        def plain(v):
            return tf.debugging.check_numerics(v, "plain") * 2
        for _ in range(3):
            xla_checked(finite)
            xla_finite(finite)
        xla_checked(nan)
        try:
            plain(nan)
        except tf.errors.InvalidArgumentError as err:
            print("plain raised:", err.message.splitlines()[0])
    """)
    [bypassed] = _events(run, "check_numerics_bypassed")
    assert bypassed["line"] == _line(path, 'return tf.debugging.check_numerics(v, "xla") * 2')
    assert (bypassed["function"], bypassed["call"], bypassed["message"]) == ("xla_checked", 4, "xla")
    assert "plain raised:" in run.stdout_tail and "plain" not in {e["function"] for e in _events(run, "check_numerics_bypassed")}
