"""PyTorch verdicts: modules, data loading, distribution and AMP deprecations (LL403, LL404, LL603, LL703, LL704, LL708).

Each reads the events of the bootstrap's `torch_modules`, `torch_data` and `torch_losses` hooks and the
`warning` events (the event schema is in `lintloop.runtime_probe.runner`).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from lintloop.runtime_probe.keras_model_verdicts import keras_softmax_into_cross_entropy
from lintloop.runtime_probe.verdicts import Summary, _confirmed, _not_confirmed, growth

Verdict = Callable[[Summary, "Summary | None"], dict[str, Any]]

# The FutureWarning of the deprecated AMP constructors (torch >= 2.4), e.g.
# "`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` instead."
_DEPRECATED_AMP = re.compile(r"`torch\.(cuda|cpu)\.amp\.(autocast|GradScaler)\(args\.\.\.\)` is deprecated")
# A CUDA scaler / autocast on a machine without CUDA: "... is enabled, but CUDA is not available.  Disabling."
_AMP_DISABLED = "CUDA is not available"


def _where(event: dict[str, Any]) -> dict[str, Any]:
    return {k: event[k] for k in ("file", "line") if event.get(k) is not None}


def sampler_without_set_epoch(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """LL403: a shuffling DistributedSampler whose epoch never changed handed out the same order in two passes
    (the epochs of a DataLoader over it)."""
    passes: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for event in summary.of_type("sampler_epoch"):
        passes.setdefault((event.get("pid"), event.get("sampler")), []).append(event)
    looked = "a shuffling DistributedSampler giving the same order in two epochs"
    repeated = 0
    for events in passes.values():
        # set_epoch with a changing value was called: a repeated order is then two passes in one epoch
        if not events[0].get("shuffle") or len({e.get("epoch") for e in events}) > 1:
            continue
        repeated = max(repeated, len(events))
        seen: dict[str, dict[str, Any]] = {}
        for event in events:
            earlier = seen.get(event["digest"])
            if earlier is None:
                seen[event["digest"]] = event
                continue
            same = sum(1 for e in events if e["digest"] == event["digest"])
            return _confirmed(
                "same_sample_order", passes=len(events), same_order_passes=same,
                first_pass=earlier["iteration"], repeat_pass=event["iteration"], epoch=event.get("epoch"),
                samples=event.get("samples"), rank=event.get("rank"), num_replicas=event.get("num_replicas"),
                text=(f"DistributedSampler (shuffle=True, rank {event.get('rank')} of {event.get('num_replicas')}) "
                      f"gave the same order of {event.get('samples')} samples in {same} of {len(events)} epochs "
                      f"(passes {earlier['iteration']} and {event['iteration']}: sampler.epoch stayed "
                      f"{event.get('epoch')})"))
    if passes and repeated < 2:
        looked += " (the sampler was iterated fewer than two times)"
    return _not_confirmed(summary, looked)


def ddp_module_forward(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """LL404: optimizer steps after a forward of the DDP-wrapped module while the wrapper's forward did not run."""
    bypasses = summary.of_type("ddp_bypass")
    if bypasses:
        first = bypasses[0]
        totals = {e.get("pid"): e for e in summary.of_type("ddp_forwards")}
        steps = sum(int(e.get("bypass_steps", 0)) for e in totals.values())
        ranks = sorted({e.get("rank") for e in bypasses}, key=str)
        return _confirmed(
            "ddp_bypassed", module=first.get("module"), first_step=first.get("step"), ranks=ranks,
            processes=len({e.get("pid") for e in bypasses}), bypass_steps=steps or None,
            ddp_forwards=sum(int(e.get("ddp_forwards", 0)) for e in totals.values()),
            text=(f"the {first.get('module')} wrapped by DistributedDataParallel ran its forward outside the "
                  f"wrapper before optimizer step {first.get('step')} on rank(s) {', '.join(map(str, ranks))}"
                  + (f" ({steps} step(s) in all)" if steps else "")
                  + ": DDP prepared no gradient all-reduce"),
            **_where(first))
    return _not_confirmed(summary, "a forward of a DDP-wrapped module outside the wrapper before an optimizer step")


def deprecated_cuda_amp(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """LL603: the deprecation FutureWarning of `torch.cuda.amp.*` / `torch.cpu.amp.*` constructors."""
    deprecations = [w for w in summary.warnings
                    if w.get("category") == "FutureWarning" and _DEPRECATED_AMP.search(str(w.get("message", "")))]
    if not deprecations:
        return _not_confirmed(summary, "a FutureWarning from a deprecated torch.cuda.amp / torch.cpu.amp constructor")
    first = deprecations[0]
    disabled = [w for w in summary.warnings if _AMP_DISABLED in str(w.get("message", ""))]
    lines = sorted({int(w["line"]) for w in deprecations if w.get("line") is not None})
    evidence: dict[str, Any] = {
        "warning": f"FutureWarning: {first.get('message')}", "warnings": len(deprecations),
        "lines": lines, "amp_disabled_warnings": len(disabled),
        "text": (f"FutureWarning: {first.get('message')} ({len(deprecations)} deprecation warning(s), line(s) "
                 f"{', '.join(map(str, lines))})"
                 + ("; and the scaler/autocast disabled itself: CUDA is not available" if disabled else "")),
        **_where(first)}
    if differential is not None:
        evidence["fixed_program_deprecations"] = sum(
            1 for w in differential.warnings if _DEPRECATED_AMP.search(str(w.get("message", ""))))
    return _confirmed("deprecation_warning", **evidence)


def eval_without_no_grad(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """LL703: evaluation forwards (outermost calls of a module in eval mode) ran with autograd on, and memory
    grew per evaluation forward (the memory rule of `verdicts.MEMORY_RULE`, on that series)."""
    series: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for event in summary.of_type("eval_forward"):
        if event.get("mem") is not None:
            series.setdefault((event.get("pid"), event.get("key")), []).append(event)
    looked = "memory growing per evaluation forward that runs with autograd enabled"
    best = None
    for events in series.values():
        with_grad = sum(1 for e in events if e.get("grad"))
        if with_grad * 2 <= len(events):  # mostly under no_grad / inference_mode
            continue
        stats = growth([(int(e["n"]), int(e["mem"])) for e in events])
        if stats is not None and stats.grows and (best is None or stats.median_increase > best[1].median_increase):
            best = (events, stats, with_grad)
    if best is None:
        grad_calls = sum(int(e.get("with_grad", 0)) for e in summary.of_type("eval_forwards"))
        if grad_calls:
            looked += f" ({grad_calls} evaluation forward(s) ran with autograd enabled; memory did not grow)"
        return _not_confirmed(summary, looked)
    events, stats, with_grad = best
    first = events[0]
    evidence: dict[str, Any] = {
        "module": first.get("module"), "eval_forwards": events[-1]["n"], "sampled_with_grad": with_grad,
        "samples": len(events), "memory": stats.to_json(), "mem_source": first.get("mem_source"),
        "text": (f"{first.get('module')} in eval mode ran {events[-1]['n']} forward(s) with autograd enabled "
                 f"({with_grad} of {len(events)} sampled); memory grew {stats.median_increase / 1024:.1f} KiB per "
                 f"forward (median; {stats.positive_fraction:.0%} of forwards grow, "
                 f"{stats.total_growth / 2**20:.1f} MiB in all)"),
        **_where(first)}
    return _confirmed("eval_memory_growth", **evidence)


def missing_train_mode(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """LL704: optimizer steps whose model ran its last forward with autograd on, in eval mode, with Dropout /
    BatchNorm submodules in eval mode."""
    firsts = summary.of_type("eval_mode_step")
    if not firsts:
        return _not_confirmed(summary, "a training step after a forward with Dropout/BatchNorm in eval mode")
    first = firsts[0]
    counts = {e.get("pid"): e for e in summary.of_type("eval_mode_steps")}
    total = counts.get(first.get("pid"), {})
    submodules = ", ".join(f"{n} {name}" for name, n in sorted(first.get("eval_submodules", {}).items()))
    steps = total.get("steps")
    return _confirmed(
        "eval_mode_training", first_step=first.get("step"), steps=steps, of_steps=total.get("of_steps"),
        module=first.get("module"), eval_submodules=first.get("eval_submodules"),
        text=(f"optimizer step {first.get('step')} trained {first.get('module')} after a forward in eval mode "
              f"({submodules} in eval mode)"
              + (f"; {steps} of {total.get('of_steps')} steps" if steps else "")),
        **_where(first))


def softmax_into_cross_entropy(summary: Summary, differential: Summary | None) -> dict[str, Any]:
    """LL708: Keras's warning that a `from_logits=True` loss got a softmax's output; else (PyTorch) the
    input of `cross_entropy` was already a probability distribution."""
    keras = keras_softmax_into_cross_entropy(summary)
    if keras is not None:
        return keras
    found = [e for e in summary.of_type("cross_entropy_input") if e.get("probabilities")]
    if not found:
        return _not_confirmed(summary, "cross_entropy inputs whose rows are probabilities (in [0, 1], summing to 1)"
                                       ", or Keras's from_logits=True-on-softmax warning")
    first = found[0]
    totals = summary.of_type("cross_entropy_inputs")
    checked = sum(int(e.get("checked", 0)) for e in totals)
    probabilities = sum(int(e.get("probabilities", 0)) for e in totals)
    return _confirmed(
        "probabilities_into_cross_entropy", shape=first.get("shape"), min=first.get("min"), max=first.get("max"),
        row_sum_error=first.get("row_sum_error"), checked=checked or None, probabilities=probabilities or None,
        text=(f"cross_entropy received probabilities, not logits: input {first.get('shape')} in "
              f"[{first.get('min'):.3g}, {first.get('max'):.3g}], rows summing to 1 (within "
              f"{first.get('row_sum_error'):.1e})"
              + (f" in {probabilities} of {checked} checked calls" if checked else "")),
        **_where(first))


VERDICTS: dict[str, Verdict] = {
    "LL403": sampler_without_set_epoch,
    "LL404": ddp_module_forward,
    "LL603": deprecated_cuda_amp,
    "LL703": eval_without_no_grad,
    "LL704": missing_train_mode,
    "LL708": softmax_into_cross_entropy,
}
