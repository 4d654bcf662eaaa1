"""LL302's claim timed: a training loop that calls `loss.item()` on every step against the same loop that
adds `loss.detach()` into a tensor on the device and converts it every N steps (N=50).

The claim (RULES.md LL302): `.item()` waits for the step's kernels, so the host cannot queue the next
step while the GPU works; the GPU idles between steps. Same model, data, seed and optimizer for both
loops; the model's parameters are reset to the same initial values before every timed run.

How each figure is measured: METHOD below.

On a CPU it runs too (only the fixture-sized model), but then the figures are the CPU's, not a GPU's.

    python3 bench/gpu/ll302_timing.py --output ll302.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

SEED = 0
DATASET = 4096  # examples, kept on the device: each step indexes a random batch of them
WARMUP_STEPS = 20
# Also written into the JSON, so the figures travel with how they were taken.
METHOD = """\
- steps/s (after the warm-up steps): wall time of a run of S steps ending in `torch.cuda.synchronize()`
  (S calibrated to about `--seconds` per run, a multiple of N); the median of `--repeats` runs, the two
  loops alternated;
- GPU idle share (CUDA only): from a run under torch.profiler recording CUDA activity alone (CUPTI: kernel,
  memcpy and memset start/end read off the GPU's clock, so host-side profiler cost adds no busy time):
  1 - (union of those intervals) / (first start to last end);
- gap share between steps (CUDA only, a cross-check that needs no profiler): CUDA events recorded before
  each step's first and after its last kernel; the share of the GPU-clock span from the first step's
  start to the last step's end that lies between one step's end and the next one's start (the queue ran dry)."""


@dataclass(frozen=True)
class Shape:
    name: str
    inputs: int
    width: int
    hidden_layers: int
    classes: int
    batch: int
    note: str

    def model(self) -> nn.Sequential:
        layers: list[nn.Module] = [nn.Linear(self.inputs, self.width), nn.ReLU()]
        for _ in range(self.hidden_layers - 1):
            layers += [nn.Linear(self.width, self.width), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(self.width, self.classes))


SHAPES = (
    Shape("fixture", 64, 256, 2, 10, 256, "LL302_bad.py's model and batch: launch-bound on a GPU"),
    Shape("medium", 512, 1024, 4, 10, 512, "host launch time and GPU time per step of the same order"),
    Shape("large", 1024, 4096, 4, 10, 1024, "GPU-bound: the kernels take longer than the host needs to queue them"),
)


class Loop:
    """One model, optimizer and data set; `run` trains from the same initial parameters every time."""

    def __init__(self, shape: Shape, device: torch.device) -> None:
        torch.manual_seed(SEED)
        self.shape, self.device = shape, device
        self.x = torch.randn(DATASET, shape.inputs, device=device)
        self.y = (self.x @ torch.randn(shape.inputs, shape.classes, device=device)).argmax(dim=1)
        self.model = shape.model().to(device)
        self.initial = {k: v.clone() for k, v in self.model.state_dict().items()}

    def run(self, steps: int, every: int, per_step: bool,
            marks: list[tuple[torch.cuda.Event, torch.cuda.Event]] | None = None) -> float:
        """Train `steps` steps; return the mean loss the host saw. `per_step`: `loss.item()` every step;
        else `loss.detach()` accumulated on the device and converted every `every` steps."""
        self.model.load_state_dict(self.initial)
        torch.manual_seed(SEED)
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)  # fresh: no momentum carried
        running, seen = torch.zeros((), device=self.device), 0.0
        for step in range(steps):
            if marks is not None:
                marks.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
                marks[-1][0].record()
            idx = torch.randint(0, DATASET, (self.shape.batch,), device=self.device)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.model(self.x[idx]), self.y[idx])
            loss.backward()
            optimizer.step()
            if marks is not None:
                marks[-1][1].record()
            if per_step:
                seen += loss.item()  # lintloop: ignore[LL302] -- the per-step sync LL302 flags is what this times
            else:
                running += loss.detach()
                if (step + 1) % every == 0:
                    seen += running.item()
                    running.zero_()
        return seen / steps

    def timed(self, steps: int, every: int, per_step: bool) -> float:
        """Wall seconds of `steps` steps, the device's queue drained at both ends."""
        _synchronize(self.device)
        start = time.perf_counter()
        self.run(steps, every, per_step)
        _synchronize(self.device)
        return time.perf_counter() - start


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def busy_union(intervals: list[tuple[float, float]]) -> tuple[float, float]:
    """(time covered by at least one interval, span from the first start to the last end)."""
    ordered = sorted(intervals)
    busy, (start, end) = 0.0, ordered[0]
    first, last = start, end
    for s, e in ordered[1:]:
        if s > end:
            busy += end - start
            start, end = s, e
        else:
            end = max(end, e)
        last = max(last, e)
    return busy + end - start, last - first


def profiler_idle_share(loop: Loop, steps: int, every: int, per_step: bool) -> dict[str, Any]:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        loop.run(steps, every, per_step)
        _synchronize(loop.device)
    spans = [(e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type == DeviceType.CUDA]
    if not spans:
        return {"idle_share": None, "error": "the profiler recorded no CUDA activity"}
    busy, span = busy_union(spans)
    return {"idle_share": round(1 - busy / span, 4), "gpu_busy_ms": round(busy / 1e3, 2),
            "gpu_span_ms": round(span / 1e3, 2), "gpu_activities": len(spans)}


def event_gap_share(loop: Loop, steps: int, every: int, per_step: bool) -> dict[str, Any]:
    marks: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    loop.run(steps, every, per_step, marks)
    _synchronize(loop.device)
    inside = sum(start.elapsed_time(end) for start, end in marks)
    span = marks[0][0].elapsed_time(marks[-1][1])
    return {"gap_share": round(1 - inside / span, 4), "span_ms": round(span, 2)}


def measure(shape: Shape, device: torch.device, every: int, repeats: int, seconds: float) -> dict[str, Any]:
    loop = Loop(shape, device)
    loop.run(WARMUP_STEPS, every, per_step=False)  # kernels chosen, allocator's blocks cached
    probe = loop.timed(every, every, per_step=False)
    steps = max(every, round(seconds / (probe / every) / every) * every)
    variants = {"item_every_step": True, f"detach_every_{every}": False}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(repeats):
        order = list(variants) if repeat % 2 == 0 else list(reversed(variants))  # drift hits both alike
        for name in order:
            times[name].append(loop.timed(steps, every, variants[name]))
    result: dict[str, Any] = {"shape": shape.__dict__, "steps_per_run": steps, "repeats": repeats}
    for name, per_step in variants.items():
        rates = [steps / t for t in times[name]]
        entry: dict[str, Any] = {"steps_per_s": round(statistics.median(rates), 1),
                                 "runs_steps_per_s": [round(r, 1) for r in rates]}
        if device.type == "cuda":
            instrumented = min(steps, 20 * every)  # enough steps for a share; keeps the profile small
            try:
                entry["profiler"] = profiler_idle_share(loop, instrumented, every, per_step)
            except Exception as exc:  # CUPTI unavailable: the event cross-check still stands
                entry["profiler"] = {"idle_share": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
            entry["events"] = event_gap_share(loop, instrumented, every, per_step)
        result[name] = entry
    base, batched = (result[name]["steps_per_s"] for name in variants)
    result["speedup"] = round(batched / base, 3)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="LL302: per-step .item() against every-N conversion")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--every", type=int, default=50, help="the batched loop converts every N steps")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=None,
                        help="wall time per timed run (default: 1.0 on CUDA, 0.5 on CPU)")
    parser.add_argument("--shapes", default=None,
                        help="comma-separated model sizes (default: all on CUDA, fixture on CPU)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        torch.set_num_threads(1)  # a rehearsal on shared cores: intra-op threads would fight the neighbours
    names = (args.shapes or ("fixture,medium,large" if cuda else "fixture")).split(",")
    seconds = args.seconds or (1.0 if cuda else 0.5)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "float32_matmul_precision": torch.get_float32_matmul_precision(), "cpu_threads": torch.get_num_threads(),
        "every": args.every, "warmup_steps": WARMUP_STEPS, "seed": SEED,
        "method": METHOD,
        "note": None if cuda else "measured on the CPU (no CUDA device): NOT a GPU figure; no idle share",
        "shapes": [],
    }
    for shape in SHAPES:
        if shape.name in names:
            start = time.perf_counter()
            entry = measure(shape, device, args.every, args.repeats, seconds)
            entry["wall_s"] = round(time.perf_counter() - start, 1)
            report["shapes"].append(entry)
            print(f"{shape.name}: {entry}", flush=True)
    args.output.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
