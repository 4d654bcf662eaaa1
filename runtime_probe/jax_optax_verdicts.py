"""optax verdicts: LL905 (the optimizer state, or the parameters, never advance between updates).

The events come from the bootstrap's `jax_optax` module: one `jax_opt_state` event per user call
site of a `GradientTransformation.update`, one `jax_params` event per call site of
`optax.apply_updates`, each summarising the digests of its checked calls.
"""

from __future__ import annotations

from typing import Any

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _not_confirmed, _where

# A site is judged on at least this many checked calls: one or two equal inputs prove nothing.
MIN_CHECKED = 3


def _frozen_state(summary: Summary) -> dict[str, Any] | None:
    """An `update` site whose every checked call got the same state, though the state it returned
    differed from the one passed in (a stateful optimizer whose new state was never fed back)."""
    for event in summary.of_type("jax_opt_state"):
        if event.get("checked", 0) >= MIN_CHECKED and event.get("distinct_inputs") == 1 and event.get("advanced"):
            return event
    return None


def _frozen_params(summary: Summary) -> dict[str, Any] | None:
    """An `apply_updates` site whose every checked call got the same parameters, with non-zero updates."""
    for event in summary.of_type("jax_params"):
        if event.get("checked", 0) >= MIN_CHECKED and event.get("distinct_inputs") == 1 \
                and event.get("nonzero_updates"):
            return event
    return None


def discarded_optimizer_state(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    state = _frozen_state(summary)
    if state is not None:
        counts = state.get("counts") or []
        count = f": its step count stayed {counts[0]}" if len(counts) == 1 and state.get("count_leaves") else ""
        text = (f"the optimizer state passed to `update` at line {state.get('line')} was the same in all "
                f"{state['checked']} checked of {state.get('calls')} updates, though each returned a new one"
                f"{count}")
        return _confirmed("opt_state_frozen", text=text, calls=state.get("calls"), checked=state["checked"],
                          counts=counts, **_where(state))
    params = _frozen_params(summary)
    if params is not None:
        text = (f"the parameters passed to `apply_updates` at line {params.get('line')} were the same in all "
                f"{params['checked']} checked of {params.get('calls')} calls, with non-zero updates: the "
                "updated parameters were never used")
        return _confirmed("params_frozen", text=text, calls=params.get("calls"), checked=params["checked"],
                          **_where(params))
    return _not_confirmed(summary, "an optax update site whose input state never changed while it returned a new "
                                   "one, or an apply_updates site whose input parameters never changed")


VERDICTS = {"LL905": discarded_optimizer_state}
