"""Keras model verdicts: a float16 softmax/sigmoid output (LL601), logits read as probabilities by a
cross-entropy (LL709), and the Keras side of LL708 (its run-time warning).

They read the `float16_output` and `logits_as_probabilities` events of the bootstrap's `keras_hooks`
and the `warning` events (the event schema is in `lintloop.runtime_probe.runner`).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _not_confirmed, _where

Verdict = Callable[[Summary, "Summary | None"], dict[str, Any]]

# Keras 3.15 (TensorFlow backend), `_get_logits`: '"`sparse_categorical_crossentropy` received
# `from_logits=True`, but the `output` argument was produced by a Softmax activation and thus does not
# represent logits. Was this intended?' (a UserWarning, once per call site; measured). Keras 2 says the
# same, and before its `_get_logits` (2.6-2.9, in published run logs) "... by a sigmoid or softmax activation".
KERAS_SOFTMAX_WARNING = re.compile(
    r"`(\w+)` received `from_logits=True`, but the `output` argument was produced by a "
    r"(Softmax|Sigmoid|sigmoid or softmax) activation")


def float16_output_layer(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """LL601: a model's softmax/sigmoid output came out in float16 (and, in eager calls, how many
    probabilities were exactly 1.0 or 0.0)."""
    found = summary.of_type("float16_output")
    if not found:
        return _not_confirmed(summary, "a Keras model whose softmax/sigmoid output is float16")
    saturated = [e for e in found if e.get("exactly_one")]
    first = saturated[0] if saturated else found[0]
    text = f"{first.get('model')}'s {first.get('activation')} output is float16 ({first.get('mode')} call)"
    if first.get("mode") == "eager":
        text += (f": {first.get('exactly_one')} of {first.get('rows')} rows have a probability of exactly 1.0, "
                 f"{first.get('exactly_zero')} of {first.get('values')} values are exactly 0.0")
    evidence: dict[str, Any] = {
        "model": first.get("model"), "activation": first.get("activation"), "dtype": first.get("dtype"),
        "mode": first.get("mode"), "exactly_one": first.get("exactly_one"),
        "exactly_zero": first.get("exactly_zero"), "rows": first.get("rows"), "text": text, **_where(first)}
    if differential is not None:
        evidence["fixed_program_float16_outputs"] = len(differential.of_type("float16_output"))
    return _confirmed("saturated_float16_output" if saturated else "float16_output", **evidence)


def logits_without_from_logits(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """LL709: a cross-entropy without `from_logits=True` received logits: values outside [0, 1] in an eager
    call, or, in a traced one, the output of an affine layer's op."""
    found = summary.of_type("logits_as_probabilities")
    if not found:
        return _not_confirmed(summary, "a Keras cross-entropy without from_logits=True given logits "
                                       "(values outside [0, 1], or an affine layer's output in a trace)")
    first = next((e for e in found if e.get("mode") == "eager"), found[0])
    loss = first.get("loss")
    if first.get("mode") == "eager":
        seen = f"values in [{first.get('min'):.3g}, {first.get('max'):.3g}], outside [0, 1]"
    else:
        seen = (f"the output of an affine layer ({' <- '.join(first.get('ops') or [])}"
                + (f", `{first.get('tensor')}`" if first.get("tensor") else "") + ") with no activation")
    evidence: dict[str, Any] = {
        "loss": loss, "mode": first.get("mode"), "min": first.get("min"), "max": first.get("max"),
        "ops": first.get("ops"),
        "text": f"`{loss}` (from_logits=False) received {seen}: it reads logits as probabilities",
        **_where(first)}
    if differential is not None:
        evidence["fixed_program_events"] = len(differential.of_type("logits_as_probabilities"))
    return _confirmed("logits_as_probabilities", **evidence)


def keras_softmax_into_cross_entropy(summary: Summary) -> dict[str, Any] | None:
    """LL708 (Keras): Keras's warning that a `from_logits=True` loss got a softmax's output, at the user's line."""
    for warning in summary.warnings:
        message = str(warning.get("message", ""))
        match = KERAS_SOFTMAX_WARNING.search(message)
        if match:
            count = sum(1 for w in summary.warnings if KERAS_SOFTMAX_WARNING.search(str(w.get("message", ""))))
            return _confirmed("keras_from_logits_warning", loss=match.group(1), activation=match.group(2),
                              warning=f"{warning.get('category')}: {message}", warnings=count,
                              text=f"{warning.get('category')}: {message.strip(chr(34))}", **_where(warning))
    return None


VERDICTS: dict[str, Verdict] = {
    "LL601": float16_output_layer,
    "LL709": logits_without_from_logits,
}
