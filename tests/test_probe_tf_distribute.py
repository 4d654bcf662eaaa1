"""The `unmirrored_objects` probe signal (LL401): objects a `strategy.run` step reaches that were not
built under the strategy, seen before the step runs."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import FIXTURES
from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.tf_distribute_verdicts import variable_outside_strategy_scope
from lintloop.runtime_probe.verdicts import Summary

pytestmark = [pytest.mark.framework,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")]


def probe(path) -> Summary:
    run = run_probe(path, ["--steps", "2"], steps=2, device="cpu", timeout=300)
    return Summary.from_events(run.events, run.returncode, run.timed_out)


def test_model_built_by_a_helper_outside_the_scope_is_named() -> None:
    summary = probe(FIXTURES / "LL401_module_strategy_bad.py")
    (event,) = summary.of_type("unmirrored_objects")
    assert event["strategy"] == "MirroredStrategy" and event["step_function"] == "train_step"
    assert event["objects"] == [{"name": "args[0]", "kind": "model", "class": "Sequential"}]  # not the optimizer
    assert event["file"].endswith("LL401_module_strategy_bad.py") and event["line"] == 59
    assert variable_outside_strategy_scope(summary, None)["status"] == "confirmed"


def test_closure_objects_built_outside_the_scope_are_named() -> None:
    summary = probe(FIXTURES / "LL401_bad.py")
    (event,) = summary.of_type("unmirrored_objects")
    assert {(o["name"], o["kind"]) for o in event["objects"]} == {("model", "model"), ("optimizer", "optimizer")}


def test_lazily_built_model_is_confirmed_by_its_cause(tmp_path) -> None:
    """The model's variables are created inside the step: TF then fails with an unrelated-looking
    graph error ("You must feed a value for placeholder tensor"), which no error text matches."""
    text = (FIXTURES / "LL401_module_strategy_bad.py").read_text()
    lazy = text.replace("        tf.keras.Input(shape=(8,)),\n", "").replace(
        "        optimizer.build(model.trainable_variables)\n", "")
    assert lazy != text
    (tmp_path / "lazy.py").write_text(lazy)
    result = variable_outside_strategy_scope(probe(tmp_path / "lazy.py"), None)
    assert result["status"] == "confirmed" and result["evidence"]["signal"] == "unmirrored_objects"


def test_objects_built_in_the_scope_are_not_reported() -> None:
    for name in ("LL401_module_strategy_good.py", "LL401_good.py"):
        summary = probe(FIXTURES / name)
        assert summary.of_type("unmirrored_objects") == []
        assert variable_outside_strategy_scope(summary, None)["status"] == "not-confirmed"
