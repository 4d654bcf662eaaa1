"""Verdicts from the distribution hooks (runtime_probe/bootstrap/_lintloop_probe/tf_distribute.py)."""

from __future__ import annotations

from typing import Any

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _error_matching, _not_confirmed, _where


def variable_outside_strategy_scope(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """LL401: the step function given to `strategy.run` reached a Keras model, optimizer or
    variable not built under that strategy (`unmirrored_objects`); else the errors Keras 3 raises
    for it at the first distributed step."""
    for event in summary.of_type("unmirrored_objects"):
        objects = event.get("objects", [])
        names = ", ".join(f"{o.get('kind')} `{o.get('name')}` ({o.get('class')})" for o in objects)
        return _confirmed("unmirrored_objects", strategy=event.get("strategy"),
                          step_function=event.get("step_function"), objects=objects,
                          text=f"`strategy.run({event.get('step_function')}, ...)` reached {names}, "
                               f"not built under the {event.get('strategy')}", **_where(event))
    error = _error_matching(summary, "Mixing different tf.distribute.Strategy", "colocate_vars_with", "AssertionError")
    if error is not None:
        return _confirmed("framework_error", error=f"{error.get('exc_type')}: {error.get('message')}", **_where(error))
    return _not_confirmed(summary, "objects not built under the strategy reaching strategy.run, or a "
                                   "distribution error at the first distributed step")


VERDICTS = {"LL401": variable_outside_strategy_scope}
