"""TensorFlow training-loop verdicts: persistent tapes kept across steps (LL304) and mixed
precision without loss scaling (LL602).

The events come from the bootstrap's `tf_tapes` (`persistent_tape` summaries) and `tf_amp`
(`amp_gradients` checks, `lso_apply` summaries); see their docstrings for what each records.
"""

from __future__ import annotations

from typing import Any, Callable

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _not_confirmed, _where

Verdict = Callable[[Summary, "Summary | None"], dict[str, Any]]


def persistent_tape_in_loop(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """Confirmed when, at a persistent tape's `with` line, a later entry found the tape of an earlier
    entry (done recording) still alive: one step of recorded tensors held past its last use."""
    sites = [e for e in summary.of_type("persistent_tape") if e.get("previous_alive")]
    if not sites:
        return _not_confirmed(summary, "a persistent GradientTape still alive when the next one at the same "
                                       "line started recording")
    site = max(sites, key=lambda e: e["previous_alive"])
    entries, alive = int(site.get("entries") or 0), int(site["previous_alive"])
    text = (f"persistent GradientTape entered {entries} times; at {alive} of the {max(entries - 1, 0)} later "
            f"entries (from entry {site.get('first_entry')}) the previous step's tape, done recording, was still "
            f"alive with everything it recorded: one extra step of activations held at peak (not growth)")
    return _confirmed("persistent_tape", text=text, entries=entries, previous_alive=alive,
                      first_entry=site.get("first_entry"), **_where(site))


def custom_loop_without_loss_scaling(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """Confirmed when a LossScaleOptimizer applied gradients of a loss that never went through
    `scale_loss` (every update divided by the scale), or when the probe's reference gradient, seeded
    with the loss scale, was nonzero where the program's float16 gradient was exactly zero."""
    unscaled = [e for e in summary.of_type("lso_apply") if e.get("unscaled")]
    if unscaled:
        site = max(unscaled, key=lambda e: e["unscaled"])
        scale = site.get("scale")
        divided = f"the loss scale {scale:,.0f}" if isinstance(scale, (int, float)) else "the loss scale"
        if site.get("eager", True):
            text = (f"LossScaleOptimizer.apply_gradients ran {site.get('applies')} times on gradients of "
                    f"tape.gradient; in {site['unscaled']} of them (from step {site.get('first_step')}) the loss had "
                    f"not gone through scale_loss, and each update was divided by {divided} anyway")
        else:
            text = (f"LossScaleOptimizer.apply_gradients was traced {site.get('applies')} times in a tf.function on "
                    f"gradients of tape.gradient; in {site['unscaled']} of the traces the loss had not gone through "
                    f"scale_loss, so every update of the compiled step is divided by {divided}")
        return _confirmed("lso_unscaled", text=text, applies=site.get("applies"), unscaled=site["unscaled"],
                          scale=scale, **_where(site))
    checks = [e for e in summary.of_type("amp_gradients") if not e.get("scaled") and e.get("reference")]
    underflowing = [e for e in checks if e.get("underflowed")]
    if underflowing:
        worst = max(underflowing, key=lambda e: e["underflowed"])
        text = (f"under {worst.get('policy')} without loss scaling, tape.gradient returned {worst['underflowed']} of "
                f"{worst.get('total')} gradient entries as exactly 0 that are nonzero with the loss scaled by "
                f"{worst.get('loss_scale', 32768):,.0f} (step {worst.get('step')}; {len(underflowing)} of "
                f"{len(checks)} checked steps underflowed)")
        return _confirmed("float16_underflow", text=text, underflowed=worst["underflowed"], zero=worst.get("zero"),
                          total=worst.get("total"), step=worst.get("step"), checked=len(checks), **_where(worst))
    looked_for = ("float16 gradients that underflow without loss scaling, or a LossScaleOptimizer applying "
                  "gradients of an unscaled loss")
    if not checks and not summary.of_type("lso_apply"):
        looked_for += " (no eager tape.gradient ran under a float16 policy)"
    return _not_confirmed(summary, looked_for)


VERDICTS: dict[str, Verdict] = {
    "LL304": persistent_tape_in_loop,
    "LL602": custom_loop_without_loss_scaling,
}
