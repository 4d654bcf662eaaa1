"""The probe's TensorFlow summary events (tf_summary): summary ops run with no default writer, on the
LL802 fixtures and on small scripts with the correct shapes it must stay quiet on.

Runs real TensorFlow programs in child processes (CPU); skipped when tensorflow is not installed.
"""
import importlib.util
import textwrap
from pathlib import Path

import pytest

from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict
from conftest import events_of as _events, source_line as _line

FIXTURES = Path(__file__).parent / "fixtures"

pytestmark = pytest.mark.framework

HEADER = """
import tempfile
import tensorflow as tf

w = tf.Variable(1.0)
optimizer = tf.keras.optimizers.SGD(0.1)
writer = tf.summary.create_file_writer(tempfile.mkdtemp())


def train_step():
    with tf.GradientTape() as tape:
        loss = tf.square(w - 3.0)
    optimizer.apply_gradients([(tape.gradient(loss, w), w)])
    return loss
"""


@pytest.fixture(autouse=True)
def _tensorflow():
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow is not installed")


_runs = {}


def _fixture(stem, steps=8):
    if stem not in _runs:
        _runs[stem] = run_probe(FIXTURES / f"{stem}.py", ["--steps", str(steps)], device="cpu", timeout=300)
    return _runs[stem]


def _script(tmp_path, body):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(HEADER).lstrip() + textwrap.dedent(body))
    return path, run_probe(path, [], steps=50, device="cpu", timeout=300)


def _no_probe_errors(run):
    ours = [e for e in _events(run, "probe_error") if "summary" in str(e.get("where", ""))]
    assert not ours, ours


def test_summaries_without_a_writer_are_counted_at_the_user_line():
    run = _fixture("LL802_bad")
    path = FIXTURES / "LL802_bad.py"
    line = _line(path, 'returned.append(bool(tf.summary.write("loss"')
    first = _events(run, "summary_no_writer")
    assert [(Path(e["file"]).name, e["line"], e["tag"]) for e in first] == [("LL802_bad.py", line, "loss")]
    totals = _events(run, "summary_writes")
    assert len(totals) == 1 and totals[0]["written"] == 0
    assert [(s["line"], s["calls"]) for s in totals[0]["without_writer"]] == [(line, 8)]  # --steps 8
    result = verdict("LL802", Summary.from_events(run.events, run.returncode, run.timed_out), None)
    assert result["status"] == "confirmed" and result["evidence"]["calls"] == 8, result
    _no_probe_errors(run)


def test_summaries_under_the_writer_are_written():
    run = _fixture("LL802_good")
    assert not _events(run, "summary_no_writer")
    assert [e["written"] for e in _events(run, "summary_writes")] == [8]
    _no_probe_errors(run)


def test_a_tf_function_traced_without_a_writer_is_seen_once_per_trace(tmp_path):
    path, run = _script(tmp_path, """
        @tf.function
        def log(loss, step):
            tf.summary.write("loss", loss, step=step)

        for step in range(6):
            log(train_step(), tf.constant(step, tf.int64))
    """)
    totals = _events(run, "summary_writes")
    assert [(s["line"], s["calls"]) for s in totals[0]["without_writer"]] == [(_line(path, "tf.summary.write"), 1)]
    _no_probe_errors(run)


def test_set_as_default_and_a_writer_around_a_caller_are_quiet(tmp_path):
    path, run = _script(tmp_path, """
        def log(loss, step):
            tf.summary.write("loss", loss, step=step)

        with writer.as_default():
            for step in range(3):
                log(train_step(), step)
        writer.set_as_default()
        for step in range(3, 6):
            log(train_step(), step)
    """)
    assert not _events(run, "summary_no_writer")
    assert [e["written"] for e in _events(run, "summary_writes")] == [6]
    _no_probe_errors(run)
