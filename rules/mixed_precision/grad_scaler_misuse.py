"""LL604 grad-scaler-misuse: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.iteration import Event, Iteration, loop_header
from lintloop.analysis.nodes import keyword_arg
from lintloop.rule import Example, LoopRule
from lintloop.screen import Needs


class GradScalerMisuse(LoopRule):
    code = "LL604"
    name = "grad-scaler-misuse"
    description = "a GradScaler used wrongly (`optimizer.step()` unscaled)"
    frameworks = ("pt",)
    needs = Needs(file=(("call:scale",),), statement=(("call:step", "call:clip_grad_norm_",
                                                      "call:clip_grad_value_", "call:clip_grad_norm", "call:clip_grad_value"),))
    probe = "error/effect"
    summary = ("With a GradScaler: `optimizer.step()` called directly after `scaler.scale(loss).backward()` "
               "(instead of `scaler.step(optimizer)`); `scaler.step(...)` with no `scaler.update()` in the "
               "iteration; gradient clipping before `scaler.unscale_(optimizer)`.")
    why = ("`scaler.scale(loss)` multiplies the loss, so every gradient is multiplied by the scale (65,536 at "
           "first). Only `scaler.step` unscales them and skips steps with inf/NaN gradients; only "
           "`scaler.update()` re-arms the scaler for the next step; clipping scaled gradients clips at a "
           "threshold 65,536 times too small.")
    symptom = ("LL604_bad.py: `optimizer.step()` after a scaled backward applies gradients 65,536× "
               "too large (the parameters jump or become inf/NaN). Without `update()`, an enabled scaler raises "
               "on the second step: \"RuntimeError: step() has already been called since the last update().\" "
               "(silent when the scaler is disabled, e.g. a CUDA scaler on a CPU-only machine). Clipping before "
               "`unscale_` makes the clip threshold meaningless.")
    remedy = ("Per iteration: `scaler.scale(loss).backward()`; `scaler.unscale_(optimizer)` before any clipping; "
              "`scaler.step(optimizer)`; `scaler.update()` (both under the same accumulation guard).")
    flagged = (
        Example("""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    optimizer.step()
""", expect="""
8:5-8:21 `optimizer.step()` steps with gradients still multiplied by the loss scale
    help: use `scaler.step(optimizer)` and `scaler.update()`
    note: the gradients of `scaler.scale(loss).backward()` are multiplied by the loss scale (65,536 at
        first), and this step never skips an inf/NaN step
"""),
        Example("""
import torch
from torch.cuda.amp import GradScaler
scaler = GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
""", expect="""
9:5-9:27 `scaler.step(optimizer)` runs every iteration with no `scaler.update()`
    help: call `scaler.update()` after each step
    note: in `for x, y in loader`, an enabled scaler raises "step() has already been called since the
        last update()" on the second step
"""),
        Example("""
import torch
scaler = torch.amp.GradScaler()
for batch in loader:
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch).loss
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
""", expect="""
8:5-8:69 `torch.nn.utils.clip_grad_norm_(model.pa…` clips gradients still multiplied by the loss scale
    help: call `scaler.unscale_(optimizer)` before clipping
    note: they come from `scaler.scale(loss).backward()`, and nothing unscales them before the clip
"""),
        Example("""
import torch
class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters())
        self.scaler = torch.amp.GradScaler("cuda")

    def train_epoch(self, loader):
        for batch in loader:
            self.optimizer.zero_grad()
            loss = self.model(batch)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
        self.scaler.update()
""", expect="""
13:13-13:45 `self.scaler.step(self.optimizer)` runs every iteration with no `self.scaler.update()`
    help: call `self.scaler.update()` after each step
    note: in `for batch in loader`, an enabled scaler raises "step() has already been called since the
        last update()" on the second step
"""),
    )
    not_flagged = (
        Example("""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""),
        Example("""
import torch
scaler = torch.amp.GradScaler("cuda")
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y) / accum
    scaler.scale(loss).backward()
    if (i + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""),
        Example("""
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    optimizer.step()
"""),
        Example("""
import torch
scaler = torch.amp.GradScaler("cuda")
def step(loss):
    scaler.scale(loss).backward()
    scaler.step(opt_g)
    scaler.update()
for x in loader:
    opt_g.zero_grad()
    step(g_loss(x))
    opt_d.zero_grad()
    d_loss(x).backward()
    opt_d.step()
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[int] = set()

    def check_iteration(self, iteration: Iteration) -> None:
        events = iteration.events
        scaled_since: Event | None = None  # the last scaled backward, until a step consumes it
        unscaled: set[str | None] = set()
        for index, event in enumerate(events):
            if event.kind == "backward":
                scaled_since = event if event.scaled_by and not self._disabled(event.scaled_by, event.node) else None
                unscaled = set()
            elif event.kind == "unscale":
                unscaled.add(event.argument)
            elif event.kind == "clip" and scaled_since is not None and event.via is None and not unscaled:
                self._report(event, f"`{self.ctx.snippet(event.node, 40)}` clips gradients still multiplied by the "
                                    "loss scale",
                             help=f"call `{scaled_since.scaled_by}.unscale_(optimizer)` before clipping",
                             note=f"they come from `{self.ctx.snippet(scaled_since.node)}`, and nothing unscales "
                                  "them before the clip")
            elif event.kind == "step" and scaled_since is not None:
                scaler = scaled_since.scaled_by
                self._report(event, f"`{self.ctx.snippet(event.node, 40)}` steps with gradients still multiplied by "
                                    "the loss scale",
                             help=f"use `{scaler}.step({event.target})` and `{scaler}.update()`",
                             note=f"the gradients of `{self.ctx.snippet(scaled_since.node)}` are multiplied by the "
                                  "loss scale (65,536 at first), and this step never skips an inf/NaN step")
                scaled_since = None
            elif event.kind == "scaler_step":
                scaled_since = None
                if not event.loops and not self._disabled(event.target, event.node) and not any(
                        e.kind == "scaler_update" and e.target == event.target for e in events):
                    self._report(event, f"`{self.ctx.snippet(event.node, 35)}` runs every iteration with no "
                                        f"`{event.target}.update()`",
                                 help=f"call `{event.target}.update()` after each step",
                                 note=f"in `{loop_header(self.ctx, iteration.loop)}`, an enabled scaler raises "
                                      "\"step() has already been called since the last update()\" on the second step")

    def _disabled(self, scaler: str | None, at: cst.CSTNode) -> bool:
        """`GradScaler(enabled=False)`: scale, step and update pass through."""
        made = self.ctx.iteration.constructor(scaler, at)
        enabled = keyword_arg(made[0], "enabled") if made is not None else None
        return isinstance(enabled, cst.Name) and enabled.value == "False"

    def _report(self, event: Event, message: str, *, help: str, note: str) -> None:
        if id(event.node) not in self._reported:
            self._reported.add(id(event.node))
            self.report(event.node, message, help=help, note=note)
