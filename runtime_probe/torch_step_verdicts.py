"""PyTorch verdicts: optimizer steps and backward passes (LL105, LL303, LL604, LL605, LL701, LL702, LL706, LL707).

The events come from the bootstrap's `torch_optimizer`, `torch_autograd` and `torch_amp`
modules (see their docstrings for what each one records and when).
"""

from __future__ import annotations

from typing import Any, Callable

from lintloop.runtime_probe.verdicts import Summary, _confirmed, _error_matching, _none_gradients, _not_confirmed

Verdict = Callable[[Summary, "Summary | None"], dict[str, Any]]

# LL702: a backwarded loss counts as the loss function's own output when its value is within
# this factor of it (an added regulariser moves it a little; a division by k >= 2 moves it
# out); the step applies the summed gradients when its norm is the norm after the last
# backward (nothing divided them in between) within this relative tolerance.
UNSCALED_LOSS = (0.75, 1.34)
SAME_NORM = 1e-3
# LL605: confirmed when some gradient elements became exactly 0 in float16, or at least this
# fraction fell below float16's normal range. Measured on tests/fixtures/LL605_*.py (torch
# 2.13, CPU, steps 1-5): without a scaler 251-330 of the 100,352 output gradient elements
# became 0 and all the others subnormal; with GradScaler (scale 65,536) none became 0 and 4-15
# subnormal (0.015 %).
SUBNORMAL_FRACTION = 0.05
LL707_WARNING = "Detected call of `lr_scheduler.step()` before `optimizer.step()`"
LL604_ERRORS = ("step() has already been called since the last update()",
                "No inf checks were recorded prior to update", "unscale_() has already been called")


def _where(event: dict[str, Any]) -> dict[str, Any]:
    return {k: event[k] for k in ("file", "line") if event.get(k) is not None}


def _grad_norms(summary: Summary, upto: int = 5) -> list[float | None]:
    """Gradient norm at each checked step 1..upto (None where unknown)."""
    by_step = {int(e["n"]): e.get("grad_norm") for e in summary.of_type("step") if "grad_norm" in e}
    return [None if by_step.get(n) is None else round(by_step[n], 4) for n in range(1, upto + 1) if n in by_step]


def _fmt(values: list[float | None]) -> str:
    return ", ".join("?" if v is None else f"{v:.3g}" for v in values)


def missing_zero_grad(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    carried = summary.of_type("grads_carried")
    if not carried:
        return _not_confirmed(summary, "gradients an optimizer step applied still in .grad, not reset, when the "
                                       "next backward() ran, nor before the next step")
    first = carried[0]
    norms = _grad_norms(summary)
    steps = [e["step"] for e in carried]
    text = (f"the {first['params']} gradient tensors applied at step {first['from_step']} were still in .grad, "
            f"not reset, when the next backward() ran, and nothing reset them before step {first['step']} "
            f"(seen at steps {', '.join(map(str, steps))}): gradients accumulate across steps; "
            f"gradient norm at steps 1-{len(norms)}: {_fmt(norms)}")
    return _confirmed("grads_carried", text=text, steps=steps, grad_norms=norms, optimizer=first.get("optimizer"),
                      backward_line=first.get("backward_line"), **_where(first))


def accumulation_without_scaling(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    looked = ("k >= 2 backward passes from one line between optimizer steps, each on a loss function's "
              "undivided output, with the step applying their sum")
    windows = [e for e in summary.of_type("accumulation") if not e.get("reset_between")]
    if not windows:
        return _not_confirmed(summary, looked)
    for event in windows:
        scales, norms = event.get("loss_scales") or [], event.get("norms") or []
        step_norm, last = event.get("grad_norm"), (norms[-1] if norms else None)
        unscaled = bool(scales) and all(s is not None and UNSCALED_LOSS[0] <= s <= UNSCALED_LOSS[1] for s in scales)
        # micro-batches of one loss: every backward from the same line (two different losses
        # backwarded before one step, like a GAN discriminator's real and fake terms, are a sum on purpose)
        one_site = len(set(event.get("backward_lines") or [None])) == 1 and None not in event["backward_lines"]
        summed = step_norm is not None and last and abs(step_norm - last) <= SAME_NORM * max(abs(last), 1e-12)
        if unscaled and summed and one_site and norms[0]:
            k = event["backwards"]
            ratio = step_norm / norms[0]
            text = (f"{k} backward passes at line {event['backward_lines'][0]} before optimizer step "
                    f"{event['step']}, each on the loss function's "
                    f"undivided output (loss / loss-function output = {_fmt(scales)}); gradient norm after each: "
                    f"{_fmt(norms)}, at the step {step_norm:.3g} ({ratio:.2f}x the first micro-batch's): "
                    f"the step applies the sum of {k} micro-batch gradients, not their mean")
            return _confirmed("accumulation", text=text, backwards=k, step=event["step"], loss_scales=scales,
                              backward_line=event["backward_lines"][0],
                              norms=norms, step_grad_norm=step_norm, ratio=round(ratio, 3), **_where(event))
    event = next((e for e in windows if any(n is not None for n in e.get("norms") or [])), windows[0])
    return {"status": "not-confirmed", "evidence": {
        "looked_for": looked, "steps": summary.steps, "backwards": event.get("backwards"),
        "loss_scales": event.get("loss_scales"), "norms": event.get("norms"), "step_grad_norm": event.get("grad_norm")}}


def step_order(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    events = summary.of_type("step_order")
    unchanged = sorted({int(e["step"]) for e in summary.params_unchanged})
    for event in events:
        if event.get("order") == "reset_between_backward_and_step":
            text = (f"{event.get('reset')} at line {event.get('reset_line')} ran after backward() at line "
                    f"{event.get('backward_line')} and before optimizer step {event.get('step')}")
            if unchanged:
                text += f"; no parameter changed at checked steps {_list(unchanged)}"
            return _confirmed("step_order", text=text, order=event["order"], params_unchanged_steps=unchanged,
                              reset_line=event.get("reset_line"), backward_line=event.get("backward_line"),
                              **_where(event))
    for event in events:
        if event.get("order") == "step_before_backward":
            text = "optimizer step 1 ran before any backward(): it had no gradients to apply"
            if 1 in unchanged:
                text += " and changed no parameter"
            return _confirmed("step_order", text=text, order=event["order"], params_unchanged_steps=unchanged,
                              **_where(event))
    return _not_confirmed(summary, "zero_grad() between backward() and optimizer.step(), or a step before any "
                                   "backward()")


def _list(values: list[int]) -> str:
    return ", ".join(map(str, values[:8])) + (", ..." if len(values) > 8 else "")


def scheduler_before_optimizer(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    for warning in summary.warnings:
        if LL707_WARNING in str(warning.get("message", "")):
            first_sentence = str(warning["message"]).split(". ")[0]
            text = f"{warning.get('category')}: {first_sentence}: the schedule's first learning rate is skipped"
            return _confirmed("warning", text=text, warning=warning.get("message"), **_where(warning))
    return _not_confirmed(summary, f"the warning \"{LL707_WARNING}\"")


def detached_before_loss(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    found = _none_gradients(summary, "torch")
    return found or _not_confirmed(summary, "None/zero gradients at the optimizer step, or backward() failing "
                                            "on a loss without grad_fn")


def grad_scaler_misuse(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    for event in summary.of_type("scaled_step"):
        text = (f"optimizer step {event.get('step')} ran outside scaler.step() on gradients still multiplied by "
                f"the loss scale {event.get('scale'):g} (gradient norm {_norm(event.get('grad_norm'))})")
        return _confirmed("scaled_step", text=text, scale=event.get("scale"), step=event.get("step"),
                          grad_norm=event.get("grad_norm"), **_where(event))
    for event in summary.of_type("scaled_clip"):
        text = (f"clip_grad_norm_(max_norm={event.get('max_norm'):g}) ran before scaler.unscale_(): it measured "
                f"a norm of {event.get('total_norm'):.4g} on gradients multiplied by the loss scale "
                f"{event.get('scale'):g}, so the gradient norm the step applies after unscaling is at most "
                f"{event.get('max_norm') / event.get('scale'):.3g}")
        return _confirmed("scaled_clip", text=text, scale=event.get("scale"), total_norm=event.get("total_norm"),
                          max_norm=event.get("max_norm"), step=event.get("step"), **_where(event))
    error = _error_matching(summary, *LL604_ERRORS)
    if error is not None:
        return _confirmed("framework_error", error=f"{error.get('exc_type')}: {error.get('message')}",
                          **_where(error))
    return _not_confirmed(summary, "an optimizer step on scaled gradients, clipping before unscale_(), or "
                                   "GradScaler's step()/update() error (an enabled scaler)")


def _norm(value: float | None) -> str:
    return "not finite" if value is None else f"{value:.4g}"


def float16_without_scaler(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    for event in summary.of_type("fp16_underflow"):
        nonzero = int(event.get("nonzero") or 0)
        to_zero, subnormal = int(event.get("to_zero") or 0), int(event.get("subnormal") or 0)
        if event.get("scaled") or not nonzero:
            continue
        if to_zero or subnormal >= SUBNORMAL_FRACTION * nonzero:
            text = (f"backward() before step {event.get('step')}: of {nonzero:,} nonzero float32 gradient "
                    f"elements cast to float16, {to_zero:,} became 0 and {subnormal:,} subnormal (below 6.1e-05, "
                    f"precision lost): float16 gradients underflow without a GradScaler")
            return _confirmed("fp16_underflow", text=text, nonzero=nonzero, to_zero=to_zero, subnormal=subnormal,
                              step=event.get("step"), **_where(event))
    found = _none_gradients(summary, "torch")
    if found is not None:
        return found
    return _not_confirmed(summary, "float32 gradients that become 0 or subnormal when cast to float16 in an "
                                   "unscaled backward() under float16 autocast")


def retain_graph_in_loop(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    records = [e for e in summary.of_type("retain_graph") if e.get("resolved_by") != "end of run"]
    kept = [e for e in records if not e.get("reused")]
    if not kept or len(kept) < len(records):
        return _not_confirmed(summary, "backward(retain_graph=True) whose graph no later backward ran through "
                                       "before the same line ran again")
    calls = {(e.get("file"), e.get("line")): e.get("calls") for e in summary.of_type("retain_graph_calls")}
    first = kept[0]
    held = [e for e in kept if e.get("freed_at_step") is not None and e["freed_at_step"] > e.get("step", 0)]
    saved = max(int(e.get("saved_bytes") or 0) for e in kept)
    total = calls.get((first.get("file"), first.get("line")))
    text = (f"backward(retain_graph=True) ran {total if total is not None else len(kept)} times; in the "
            f"{len(kept)} checked calls no later backward went through the retained graph ({first.get('nodes')} "
            f"nodes, {saved / 1024:.1f} KiB of saved tensors) before the line ran again")
    if held:
        text += (f", and {len(held)} of them were freed only after the next optimizer step: one extra step of graph "
                 "and activations held at peak (not growth)")
    return _confirmed("retain_graph", text=text, calls=total, checked=len(kept), saved_bytes=saved,
                      held_past_step=len(held), **_where(first))


VERDICTS: dict[str, Verdict] = {
    "LL105": detached_before_loss,
    "LL303": retain_graph_in_loop,
    "LL604": grad_scaler_misuse,
    "LL605": float16_without_scaler,
    "LL701": missing_zero_grad,
    "LL702": accumulation_without_scaling,
    "LL706": step_order,
    "LL707": scheduler_before_optimizer,
}
