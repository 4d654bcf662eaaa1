"""LL605 float16-without-grad-scaler: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.pytorch import NO_GRAD_CALLS, Autocast
from lintloop.analysis.nodes import argument, call_name, calls_within, positional_args, receiver
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

_TORCH_BACKWARD = {"torch.autograd.backward", "torch.autograd.grad"}
# Calls whose result is a scaled loss: `scaler.scale(loss)`, apex's `amp.scale_loss(loss, opt)`.
_SCALING_CALLS = {"scale", "scale_loss"}


class Float16WithoutGradScaler(Rule):
    code = "LL605"
    name = "float16-without-grad-scaler"
    description = "float16 autocast training without a GradScaler"
    frameworks = ("pt",)
    # The autocast may sit in a helper whose caller calls backward: the screen selects it with the caller.
    needs = Needs(file=(("name:autocast",),), statement=(("call:backward", "call:grad"),))
    probe = "grad"
    summary = ("A training loop (backward and an optimizer step, also through same-file step functions) "
               "computes its loss under float16 autocast — `dtype=torch.float16` / `torch.half`, or a CUDA "
               "autocast without `dtype` (`torch.autocast(\"cuda\")`, `torch.cuda.amp.autocast()`: float16 by "
               "default) — and backpropagates it without a GradScaler (`scaler.scale(loss).backward()`).")
    why = ("float16 has 5 exponent bits: gradient values below about 6e-8 round to zero and those below 6e-5 "
           "lose precision, so small gradients vanish. A GradScaler multiplies the loss (by 65536 at first) "
           "before backward, unscales the gradients before the step, and skips steps whose gradients "
           "overflowed. bfloat16 has float32's exponent range and needs no scaler (CPU autocast defaults to it).")
    symptom = ("Nothing fails or warns: small gradients come back as exact zeros (or overflow to inf/NaN, "
               "which nothing skips) and training stalls quietly. LL605_bad.py (an autoencoder, "
               "float16 autocast on CPU, torch 2.13) prints `zero_grad_fraction=0.0041` rising to `0.0051` over "
               "4 steps for its output layer's weight gradient; LL605_good.py, with a GradScaler, prints "
               "`0.0000`. With a smaller loss (1.7e-6, e.g. divided by 64 accumulation steps) 99.7% of a 3-layer "
               "MLP's gradient entries were exactly zero without scaling, 0.6% with the loss scaled by 65536 as "
               "GradScaler does (0.26% in float32).")
    remedy = ("Create `scaler = torch.amp.GradScaler(\"cuda\")` once; in the loop call "
              "`scaler.scale(loss).backward()`, `scaler.step(optimizer)`, `scaler.update()` (and "
              "`scaler.unscale_(optimizer)` before gradient clipping). Or use `dtype=torch.bfloat16` where the "
              "hardware supports it.")
    flagged = (
        Example("""
import torch
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""", expect="""
4:10-4:32 float16 autocast in a training loop whose backward `loss.backward()` has no GradScaler
    help: use `scaler.scale(loss).backward()` with `torch.amp.GradScaler`, or autocast to bfloat16
    note: float16 is autocast's default on cuda; gradients under ~6e-8 become zero in float16
"""),
        Example("""
import torch
from torch.cuda.amp import autocast
def train_step(model, optimizer, batch):
    with autocast():
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
for epoch in range(3):
    for batch in loader:
        train_step(model, optimizer, batch)
""", expect="""
4:10-4:20 float16 autocast in a training loop whose backward `loss.backward()` has no GradScaler
    help: use `scaler.scale(loss).backward()` with `torch.amp.GradScaler`, or autocast to bfloat16
    note: float16 is autocast's default on cuda; gradients under ~6e-8 become zero in float16
"""),
        Example("""
import torch
amp_dtype = torch.float16
def compute_loss(model, x, y):
    with torch.autocast(device_type=device.type, dtype=amp_dtype):
        return torch.nn.functional.cross_entropy(model(x), y)
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    loss = compute_loss(model, x, y)
    loss.backward()
    opt.step()
""", expect="""
4:10-4:66 float16 autocast in a training loop whose backward `loss.backward()` has no GradScaler
    help: use `scaler.scale(loss).backward()` with `torch.amp.GradScaler`, or autocast to bfloat16
    note: gradients under ~6e-8 become zero in float16
"""),
        Example("""
import torch
class Trainer:
    @torch.autocast("cuda", dtype=torch.half)
    def loss(self, batch):
        return self.model(batch).mean()
    def fit(self, loader):
        for batch in loader:
            self.loss(batch).backward()
            self.optimizer.step()
""", expect="""
3:6-3:46 float16 autocast in a training loop whose backward `self.loss(batch).backward()` has no
    GradScaler
    help: use `scaler.scale(self.loss(batch)).backward()` with `torch.amp.GradScaler`, or autocast to
        bfloat16
    note: gradients under ~6e-8 become zero in float16
"""),
        Example("""
import functools
import torch
amp_autocast = functools.partial(torch.autocast, device_type="cuda", dtype=torch.float16)
def train_one_epoch(model, loader, optimizer):
    for x, y in loader:
        with amp_autocast():
            loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
""", expect="""
6:14-6:28 float16 autocast in a training loop whose backward `loss.backward()` has no GradScaler
    help: use `scaler.scale(loss).backward()` with `torch.amp.GradScaler`, or autocast to bfloat16
    note: gradients under ~6e-8 become zero in float16
"""),
        Example("""
import torch
def train_one_epoch(model, loader, optimizer, amp=True):
    for step, (x, y) in enumerate(loader):
        if amp:
            with torch.cuda.amp.autocast():
                loss = criterion(model(x), y)
        else:
            loss = criterion(model(x), y)
        amp = step < 100
        if not amp:
            loss.backward()
            optimizer.step()
""", expect="""
5:18-5:43 float16 autocast in a training loop whose backward `loss.backward()` has no GradScaler
    help: use `scaler.scale(loss).backward()` with `torch.amp.GradScaler`, or autocast to bfloat16
    note: float16 is autocast's default on cuda; gradients under ~6e-8 become zero in float16
"""),
    )
    not_flagged = (
        Example("""
from typing import cast
import torch
def update(engine, batch):
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(batch[0]), batch[1])
    cast(torch.Tensor, scaler.scale(loss)).backward()
    scaler.step(optimizer)
    scaler.update()
"""),
        Example("""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""),
        Example("""
import torch
for x, y in loader:
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""),
        Example("""
import torch
model.eval()
with torch.no_grad(), torch.autocast("cuda"):
    for x in loader:
        preds.append(model(x).argmax(-1))
"""),
        Example("""
import torch
for x, y in loader:
    with torch.autocast("cuda", enabled=False):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""),
        Example("""
import torch
for x, y in loader:
    with torch.autocast("cpu"):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""),
        Example("""
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
for batch in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(**batch).loss
    accelerator.backward(loss)
    optimizer.step()
"""),
        Example("""
import torch
for x, y in loader:
    with torch.no_grad(), torch.autocast("cuda"):
        soft_targets = teacher(x).softmax(-1)
    loss = kl_div(student(x).log_softmax(-1), soft_targets)
    loss.backward()
    optimizer.step()
"""),
        Example("""
from functools import partial
import torch
amp_dtype = torch.bfloat16 if args.amp_dtype == "bfloat16" else torch.float16
amp_autocast = partial(torch.autocast, device_type=device.type, dtype=amp_dtype)
for x, y in loader:
    with amp_autocast():
        loss = criterion(model(x), y)
    loss_scaler(loss, optimizer)
"""),
        Example("""
import torch
def train_one_epoch(model, loader, optimizer, amp_step, amp=True):
    for x, y in loader:
        if amp:
            with torch.cuda.amp.autocast():
                loss = criterion(model(x), y)
        else:
            loss = criterion(model(x), y)
        if amp:
            amp_step(loss, optimizer)
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
"""),
        Example("""
import torch
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
"""),
    )

    def visit_Module(self, node: cst.Module) -> None:
        for autocast in self.ctx.torch.autocasts:
            if not autocast.float16 or self._without_grad(autocast):
                continue
            # A backward on the other branch of the autocast's condition (`if use_amp:` ... `else:`) is
            # the full-precision path's.
            backwards = [(target, call) for target, call in self._differentiating(autocast)
                         if self.ctx.training.runs_optimizer_steps(call, functions=True)
                         and not self.ctx.exclusive(autocast.call, call)]
            if backwards and not any(self._scaled(target, call) for target, call in backwards):
                default = "" if argument(autocast.call, 1, "dtype") is not None else (
                    f"float16 is autocast's default on {autocast.device}; ")
                target, call = backwards[0]
                self.report(autocast.anchor,
                            f"float16 autocast in a training loop whose backward `{self.ctx.snippet(call, 35)}` has no "
                            "GradScaler",
                            help=f"use `scaler.scale({self.ctx.snippet(target, 30)}).backward()` with "
                                 "`torch.amp.GradScaler`, or autocast to bfloat16",
                            note=f"{default}gradients under ~6e-8 become zero in float16")

    def _without_grad(self, autocast: Autocast) -> bool:
        """A region under `no_grad` / `inference_mode` (a teacher's forward, evaluation) trains nothing."""
        region = autocast.region
        if isinstance(region, cst.FunctionDef):
            return any(isinstance(d.decorator, cst.Call) and self.ctx.names.callee(d.decorator) in NO_GRAD_CALLS
                       for d in region.decorators) or bool(self.ctx.torch.no_grad.enclosing(region))
        return bool(self.ctx.torch.no_grad.enclosing(region.body))

    def _differentiating(self, autocast: Autocast) -> list[tuple[cst.BaseExpression, cst.Call]]:
        """The torch backward calls (with their targets) that differentiate a value computed in the region."""
        region = autocast.region
        body = region.body
        found: list[tuple[cst.BaseExpression, cst.Call]] = []
        for target, call in self.ctx.training.differentiated:
            if not self._is_torch_backward(call):
                continue
            if self.ctx.is_inside(call, body) or any(
                    self.ctx.training.reaches(value, target, call) for value in calls_within(body)):
                found.append((target, call))
            elif isinstance(region, cst.FunctionDef) and any(self.ctx.training.reaches(site, target, call)
                                                             for site in self.ctx.calls.call_sites.get(region, ())):
                found.append((target, call))
        return found

    def _is_torch_backward(self, call: cst.Call) -> bool:
        return call_name(call) == "backward" or self.ctx.names.callee(call) in _TORCH_BACKWARD

    def _scaled(self, target: cst.BaseExpression, backward: cst.Call) -> bool:
        """`scaler.scale(loss).backward()`, a name bound to a scaled loss, or a framework's
        `accelerator.backward(loss)` / `engine.backward(loss)` (which scales itself when set up for fp16)."""
        if call_name(backward) == "backward" and receiver(backward) is not None and positional_args(backward):
            return True
        value = self.ctx.flow.resolve_value(target, backward)
        if isinstance(value, cst.Call) and self.ctx.names.callee(value) == "typing.cast" and len(value.args) == 2:
            value = self.ctx.flow.resolve_value(value.args[1].value, backward)  # `cast(Tensor, scaler.scale(loss))`
        return isinstance(value, cst.Call) and call_name(value) in _SCALING_CALLS
