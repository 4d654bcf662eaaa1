"""The probe's TensorFlow training-loop events: persistent tapes kept across steps (`tf_tapes`, LL304)
and float16 gradients without loss scaling (`tf_amp`, LL602), on small real programs (CPU)."""

import importlib.util
import textwrap

import pytest

from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict

pytestmark = pytest.mark.framework

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("tensorflow is not installed", allow_module_level=True)

_TAPES = """
import tensorflow as tf

w = tf.Variable(tf.ones((4, 4)))
x = tf.ones((2, 4))
opt = tf.keras.optimizers.SGD(0.01)

def step():
    with tf.GradientTape(persistent=True) as inner:  # INNER
        y = tf.reduce_sum(tf.matmul(x, w))
    g = inner.gradient(y, [w])
    opt.apply_gradients(zip(g, [w]))

for i in range(6):
    with tf.GradientTape(persistent=True) as kept:  # KEPT
        y = tf.reduce_sum(tf.matmul(x, w) ** 2)
    g1 = kept.gradient(y, [w])
    g2 = kept.gradient(y * 2.0, [w])
    opt.apply_gradients(zip(g1, [w]))

for i in range(6):
    with tf.GradientTape(persistent=True) as freed:  # FREED
        y = tf.reduce_sum(tf.matmul(x, w) ** 2)
    g = freed.gradient(y, [w])
    del freed
    opt.apply_gradients(zip(g, [w]))

for i in range(6):
    step()

@tf.function
def traced():
    with tf.GradientTape(persistent=True) as graph_tape:  # TRACED
        y = tf.reduce_sum(tf.matmul(x, w))
    return graph_tape.gradient(y, [w])

for i in range(3):
    traced()
"""

_AMP = """
import keras
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(128, dtype="float32")])
x = tf.random.normal((32, 32))
y = model(x) + tf.random.normal((32, 128), stddev=1e-3)

def mse():
    return tf.reduce_mean(tf.square(model(x) - y))

plain = keras.optimizers.SGD(0.01)
for i in range(20):
    with tf.GradientTape() as tape:
        loss = mse()
    grads = tape.gradient(loss, model.trainable_variables)  # PLAIN
    plain.apply_gradients(zip(grads, model.trainable_variables))

unscaled = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))
for i in range(20):
    with tf.GradientTape() as tape:
        loss = mse()
    grads = tape.gradient(loss, model.trainable_variables)
    unscaled.apply_gradients(zip(grads, model.trainable_variables))  # UNSCALED

scaled = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))
for i in range(20):
    with tf.GradientTape() as tape:
        loss = scaled.scale_loss(mse())
    grads = tape.gradient(loss, model.trainable_variables)  # SCALED
    scaled.apply_gradients(zip(grads, model.trainable_variables))  # SCALED_APPLY

keras.mixed_precision.set_global_policy("mixed_bfloat16")
for i in range(20):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(x, tf.float32))
    tape.gradient(loss, [x])
"""


def _run(tmp_path, name, source):
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    run = run_probe(script, [], steps=0, device="cpu", timeout=300)
    lines = {marker: i + 1 for i, text in enumerate(script.read_text().splitlines())
             for marker in [text.rsplit("# ", 1)[-1]] if "  # " in text}
    summary = Summary.from_events(run.events, run.returncode, run.timed_out)
    assert run.returncode == 0, run.events
    assert not summary.of_type("probe_error"), summary.of_type("probe_error")
    return summary, lines


@pytest.fixture(scope="module")
def tapes(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("tapes"), "tapes.py", _TAPES)


@pytest.fixture(scope="module")
def amp(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("amp"), "amp.py", _AMP)


def test_previous_persistent_tape_alive_only_without_del(tapes):
    summary, lines = tapes
    by_line = {e["line"]: e for e in summary.of_type("persistent_tape")}
    assert by_line[lines["KEPT"]]["entries"] == 6
    assert by_line[lines["KEPT"]]["previous_alive"] == 5
    assert by_line[lines["KEPT"]]["first_entry"] == 2
    assert by_line[lines["FREED"]]["previous_alive"] == 0
    assert by_line[lines["INNER"]]["entries"] == 6 and by_line[lines["INNER"]]["previous_alive"] == 0
    assert lines["TRACED"] not in by_line  # graph code: tapes exist only while tracing
    result = verdict("LL304", summary)
    assert result["status"] == "confirmed" and result["evidence"]["line"] == lines["KEPT"]
    assert "at 5 of the 5 later entries" in result["evidence"]["text"]


def test_float16_underflow_is_counted_against_a_scaled_reference(amp):
    summary, lines = amp
    checks = summary.of_type("amp_gradients")
    plain = [e for e in checks if e["line"] == lines["PLAIN"]]
    assert len(plain) == 4  # tape entries 1-3 and 20 are checked
    assert all(not e["scaled"] and e["reference"] and e["policy"] == "mixed_float16" for e in plain)
    assert all(0 < e["underflowed"] <= e["zero"] <= e["total"] for e in plain)
    scaled = [e for e in checks if e["line"] == lines["SCALED"]]
    assert scaled and all(e["scaled"] and not e["reference"] and e["underflowed"] == 0 for e in scaled)
    assert all(e["policy"] == "mixed_float16" for e in checks)  # nothing checked under mixed_bfloat16


def test_loss_scale_optimizer_applies_counted_by_whether_the_loss_was_scaled(amp):
    summary, lines = amp
    applies = {e["line"]: e for e in summary.of_type("lso_apply")}
    assert applies[lines["UNSCALED"]]["applies"] == 20 and applies[lines["UNSCALED"]]["unscaled"] == 20
    assert applies[lines["UNSCALED"]]["scale"] == 32768.0
    assert applies[lines["SCALED_APPLY"]]["applies"] == 20 and applies[lines["SCALED_APPLY"]]["unscaled"] == 0
    result = verdict("LL602", summary)
    assert result["status"] == "confirmed" and result["evidence"]["signal"] == "lso_unscaled"
    assert result["evidence"]["line"] == lines["UNSCALED"]
