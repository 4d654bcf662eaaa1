"""The probe's Keras model and loss hooks on small programs under the real framework (CPU): the raw events
(`logits_as_probabilities`, `float16_output`, Keras's from_logits warning as a `warning` event at the
user's line), and the verdicts LL601/LL708 (Keras)/LL709 on them.

tensorflow is never imported in the test process.
"""
import importlib.util
import textwrap

import pytest

from conftest import FIXTURES
from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict

pytestmark = [pytest.mark.framework,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")]


def _probe(script, steps=60):
    run = run_probe(script, [], steps=steps, device="cpu", timeout=240)
    assert run.returncode == 0, run.stderr_tail
    assert not [e for e in run.events if e["type"] == "probe_error"], run.events
    return run


def _line(script, marker):
    [number] = [i for i, text in enumerate(script.read_text().splitlines(), 1) if marker in text]
    return number


def _summary(run):
    return Summary.from_events(run.events, run.returncode, run.timed_out)


def test_eager_cross_entropy_inputs_and_float16_outputs(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
        import numpy as np
        # tensorflow first: with `import keras` first, TensorFlow's install re-runs every pending installer
        # (`imports.watch`), which installs the Keras hooks on the half-imported `keras` module.
        import tensorflow
        import keras

        keras.utils.set_random_seed(0)
        x = np.random.default_rng(0).normal(size=(16, 8)).astype("float32")
        y = np.arange(16) % 3
        linear = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
        soft = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, activation="softmax")])
        plain = keras.losses.SparseCategoricalCrossentropy()
        logits = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        for step in range(3):
            plain(y, linear(x))  # LOGITS READ AS PROBABILITIES
            logits(y, linear(x))
            plain(y, soft(x))
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
        bf16 = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3), keras.layers.Softmax()])
        bf16(x * 50)
        keras.mixed_precision.set_global_policy("mixed_float16")
        f16 = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3), keras.layers.Softmax()])
        f16(x * 50)  # FLOAT16 OUTPUT
        safe = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3), keras.layers.Softmax(dtype="float32")])
        safe(x * 50)
    """))
    run = _probe(script)
    [logits] = [e for e in run.events if e["type"] == "logits_as_probabilities"]
    assert logits["mode"] == "eager" and logits["loss"] == "sparse_categorical_crossentropy"
    assert logits["min"] < 0 and logits["check"] == 1
    assert (logits["file"], logits["line"]) == (str(script), _line(script, "LOGITS READ AS PROBABILITIES"))
    [f16] = [e for e in run.events if e["type"] == "float16_output"]
    assert f16["mode"] == "eager" and f16["activation"] == "softmax" and f16["dtype"] == "float16"
    assert f16["rows"] == 16 and f16["exactly_one"] > 0
    assert f16["line"] == _line(script, "FLOAT16 OUTPUT")
    summary = _summary(run)
    assert verdict("LL709", summary)["status"] == "confirmed"
    assert verdict("LL601", summary)["evidence"]["signal"] == "saturated_float16_output"


def test_traced_logits_into_compiled_string_loss():
    script = FIXTURES / "LL709_bad.py"
    run = _probe(script)
    [event] = [e for e in run.events if e["type"] == "logits_as_probabilities"]
    assert event["mode"] == "traced" and event["ops"][-1] == "MatMul"
    assert (event["file"], event["line"]) == (str(script), _line(script, "history = model.fit("))
    result = verdict("LL709", _summary(run))
    assert result["status"] == "confirmed"
    assert "received the output of an affine layer" in result["evidence"]["text"]


def test_float16_softmax_output_traced_and_eager():
    script = FIXTURES / "LL601_bad.py"
    run = _probe(script)
    events = [e for e in run.events if e["type"] == "float16_output"]
    assert [e["mode"] for e in events] == ["traced", "eager"]
    assert events[0]["line"] == _line(script, "history = model.fit(")
    assert events[1]["line"] == _line(script, "probs = model(x)") and events[1]["exactly_one"] > 0
    result = verdict("LL601", _summary(run))
    assert result["evidence"]["signal"] == "saturated_float16_output"
    assert "rows have a probability of exactly 1.0" in result["evidence"]["text"]


def test_keras_from_logits_warning_at_the_users_line():
    script = FIXTURES / "LL708_keras_bad.py"
    run = _probe(script)
    [warning] = [e for e in run.events if e["type"] == "warning" and "from_logits=True" in e["message"]]
    assert warning["category"] == "UserWarning"
    assert (warning["file"], warning["line"]) == (str(script), _line(script, "history = model.fit("))
    result = verdict("LL708", _summary(run))
    assert result["evidence"]["signal"] == "keras_from_logits_warning"
    assert result["evidence"]["loss"] == "sparse_categorical_crossentropy"
    assert "was produced by a Softmax activation" in result["evidence"]["text"]
