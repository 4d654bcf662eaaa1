"""The probe's tf.data hooks (runtime_probe/bootstrap/_lintloop_probe/tf_data.py): the raw events on
small programs, and the LL503 / LL504 verdicts on them."""

import importlib.util
import textwrap

import pytest

from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict

pytestmark = [pytest.mark.framework,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")]

SHUFFLES = """\
import tensorflow as tf
examples = tf.data.Dataset.range(64)
batched_then_shuffled = examples.batch(8).shuffle(4)
windows = examples.batch(5, drop_remainder=True).map(lambda w: w[:-1]).shuffle(8).batch(2)
blocks = examples.batch(8).unbatch().shuffle(16).batch(4)
shuffled_then_batched = examples.shuffle(64).batch(8)
for ds in (batched_then_shuffled, windows, blocks, shuffled_then_batched):
    for _ in ds:
        pass
"""

CACHES = """\
import tensorflow as tf
def jitter(x):
    return tf.cast(x, tf.float32) + tf.random.uniform(())
def scale(x):
    return tf.cast(x, tf.float32) * 2.0
def fixed_seed(x):
    return tf.cast(x, tf.float32) + tf.random.stateless_uniform((), seed=(1, 2))
examples = tf.data.Dataset.range(32)
random_then_cached = examples.map(jitter).cache().batch(4)
deterministic_then_cached = examples.map(scale).cache().batch(4)
stateless_then_cached = examples.map(fixed_seed).cache().batch(4)
cached_then_random = examples.cache().map(jitter).batch(4)
for ds in (random_then_cached, deterministic_then_cached, stateless_then_cached, cached_then_random):
    for epoch in range(2):
        for _ in ds:
            pass
"""

_runs = {}


def probe(tmp_path_factory, name, source):
    if name not in _runs:
        path = tmp_path_factory.mktemp("tf_data") / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        run = run_probe(path, [], steps=60, device="cpu", timeout=300)
        _runs[name] = (run, Summary.from_events(run.events, run.returncode, run.timed_out))
    return _runs[name]


def test_shuffle_of_batches_is_seen_and_others_are_not(tmp_path_factory):
    run, summary = probe(tmp_path_factory, "shuffles", SHUFFLES)
    assert run.returncode == 0, run.events
    [event] = summary.of_type("shuffled_batches")  # not the windows, blocks or example shuffles
    assert event["line"] == 3 and event["batch_line"] == 3
    assert event["batch_size"] == 8 and event["buffer_size"] == 4
    for epoch in event["epochs"]:
        assert len(epoch) == 8
        assert sorted(k for _, k, _ in epoch) == list(range(8))  # each input batch once, unchanged
        assert all(rows == 8 for _, _, rows in epoch)
    result = verdict("LL503", summary)
    assert result["status"] == "confirmed"
    assert "= examples " in result["evidence"]["text"] and ", in order" in result["evidence"]["text"]


def test_cache_after_a_random_map_is_frozen_and_only_it(tmp_path_factory):
    run, summary = probe(tmp_path_factory, "caches", CACHES)
    assert run.returncode == 0, run.events
    events = {e["line"]: e for e in summary.of_type("cached_random_map")}
    # the random map, the deterministic one and the stateless one are checked; the cache before
    # the random map has no map before it
    assert sorted(events) == [9, 10, 11]
    frozen = events[9]
    assert frozen["random"] is True and frozen["identical"] is True and frozen["elements"] == 32
    assert frozen["map_line"] == 9 and frozen["epoch_digests"][0] == frozen["epoch_digests"][1]
    assert events[10]["random"] is False and events[11]["random"] is False
    result = verdict("LL504", summary)
    assert result["status"] == "confirmed" and result["evidence"]["map_line"] == 9


def test_verdicts_need_every_batch_matched_and_a_random_map():
    partial = Summary.from_events([{"type": "shuffled_batches", "batch_size": 4, "buffer_size": 1000,
                                    "epochs": [[[0, 3, 4], [1, None, 4]], [[0, 1, 4]]], "line": 5}], 0, False)
    assert verdict("LL503", partial)["status"] == "not-confirmed"
    deterministic = Summary.from_events([{"type": "cached_random_map", "random": False, "line": 7}], 0, False)
    assert verdict("LL504", deterministic)["status"] == "not-confirmed"
    too_big = Summary.from_events([{"type": "cached_random_map", "random": True, "elements": 10 ** 6,
                                    "skipped": "cache size unknown or above 4096 elements", "line": 7}], 0, False)
    assert verdict("LL504", too_big)["status"] == "not-confirmed"
