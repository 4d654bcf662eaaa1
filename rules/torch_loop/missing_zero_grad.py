"""LL701 missing-zero-grad: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.iteration import Iteration, loop_header
from lintloop.analysis.nodes import dotted
from lintloop.rule import Example, LoopRule
from lintloop.screen import Needs


# Library calls given the optimizer that leave its gradients as they are: apex's loss scaling context.
_KEEP_GRADIENTS = {"apex.amp.scale_loss", "apex.amp.handle.scale_loss"}


class MissingZeroGrad(LoopRule):
    code = "LL701"
    name = "missing-zero-grad"
    description = "a training loop that never zeroes gradients"
    frameworks = ("pt",)
    needs = Needs(file=(("call:backward", "call:manual_backward"),),
                  statement=(("call:step",),))
    probe = "effect"
    summary = ("A training loop calls `.backward()` and `optimizer.step()` but never `zero_grad()` (on the "
               "optimizer or the model) nor `p.grad = None` in the loop: every step applies the sum of all "
               "gradients computed so far. A step function given to pytorch-ignite's `Engine(update_fn)` is the "
               "body of such a loop (the engine calls it once per batch).")
    why = ("`backward()` adds into `.grad`; only `zero_grad()` (or setting the gradients to None) resets them. "
           "Without it, step n uses the gradients of steps 1..n together, so updates grow with every step.")
    symptom = ("LL701_bad.py (one fixed batch): the gradients applied at step 1 are still in `.grad` "
               "when the next `backward()` adds to them, and the gradient norm at steps 1-5 is 4.32, 6.74, 10.6, 15.3, "
               "19.6 instead of staying near 4.3 (torch 2.13; FRAMEWORK_FACTS #10: 0.87 → 1.73 → 2.60 … for a "
               "smaller model); the loss diverges and nothing warns.")
    remedy = ("Call `optimizer.zero_grad()` (or `optimizer.zero_grad(set_to_none=True)`, or `model.zero_grad()`) "
              "once per iteration, before `backward()` or right after `optimizer.step()`. With gradient "
              "accumulation, zero after the conditional step.")
    flagged = (
        Example("""
import torch
model = torch.nn.Linear(10, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
""", expect="""
7:5-7:21 `optimizer.step()` without `optimizer.zero_grad()` in the loop: gradients pile up
    help: call `optimizer.zero_grad()` once per iteration, before `loss.backward()` or right after
        `optimizer.step()`
    note: `loss.backward()` adds into `.grad` on every iteration of `for x, y in loader` and nothing
        resets it (no model `zero_grad()`, no `p.grad = None`): each step applies the sum of all
        gradients so far
"""),
        Example("""
import torch
def train_one_epoch(model, loader, optimizer, criterion):
    model.train()
    for images, target in loader:
        output = model(images)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()

def main():
    model = build_model()
    optimizer = torch.optim.AdamW(model.parameters())
    for epoch in range(10):
        train_one_epoch(model, train_loader, optimizer, criterion)
""", expect="""
8:9-8:25 `optimizer.step()` without `optimizer.zero_grad()` in the loop: gradients pile up
    help: call `optimizer.zero_grad()` once per iteration, before `loss.backward()` or right after
        `optimizer.step()`
    note: `loss.backward()` adds into `.grad` on every iteration of `for images, target in loader` and
        nothing resets it (no model `zero_grad()`, no `p.grad = None`): each step applies the sum of all
        gradients so far
"""),
        Example("""
import torch
class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def fit(self, loader, epochs):
        self.optimizer.zero_grad()
        for epoch in range(epochs):
            for batch in loader:
                loss = self.model(batch).mean()
                loss.backward()
                self.optimizer.step()
""", expect="""
13:17-13:38 `self.optimizer.step()` without `self.optimizer.zero_grad()` in the loop: gradients pile up
    help: call `self.optimizer.zero_grad()` once per iteration, before `loss.backward()` or right after
        `self.optimizer.step()`
    note: `loss.backward()` adds into `.grad` on every iteration of `for batch in loader` and nothing
        resets it (no model `zero_grad()`, no `p.grad = None`): each step applies the sum of all
        gradients so far
"""),
        Example("""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""", expect="""
7:5-7:27 `scaler.step(optimizer)` without `optimizer.zero_grad()` in the loop: gradients pile up
    help: call `optimizer.zero_grad()` once per iteration, before `scaler.scale(loss).backward()` or
        right after `scaler.step(optimizer)`
    note: `scaler.scale(loss).backward()` adds into `.grad` on every iteration of `for x, y in loader`
        and nothing resets it (no model `zero_grad()`, no `p.grad = None`): each step applies the sum of
        all gradients so far
"""),
        Example("""
import torch
from ignite.engine import Engine

def train_step(engine, batch):
    classifier.train()
    images, labels = batch
    loss = loss_fn(classifier(images), labels)
    loss.backward()
    optimizer.step()
    return loss.item()

trainer = Engine(train_step)
trainer.run(train_loader, max_epochs=5)
""", expect="""
9:5-9:21 `optimizer.step()` without `optimizer.zero_grad()` in `train_step`: gradients pile up
    help: call `optimizer.zero_grad()` once per iteration, before `loss.backward()` or right after
        `optimizer.step()`
    note: `loss.backward()` adds into `.grad` on every call of `train_step`, which `Engine(train_step)`
        runs once per iteration, and nothing resets it (no model `zero_grad()`, no `p.grad = None`):
        each step applies the sum of all gradients so far
"""),
        Example("""
import ignite
import torch
from apex import amp

def update(engine, batch):
    x, y = batch
    loss = criterion(net(x), y)
    with amp.scale_loss(loss, opt) as scaled:
        scaled.backward()
    opt.step()

ignite.engine.Engine(process_function=update).run(loader)
""", expect="""
10:5-10:15 `opt.step()` without `opt.zero_grad()` in `update`: gradients pile up
    help: call `opt.zero_grad()` once per iteration, before `scaled.backward()` or right after
        `opt.step()`
    note: `scaled.backward()` adds into `.grad` on every call of `update`, which
        `ignite.engine.Engine(process_function=update)` runs once per iteration, and nothing resets it
        (no model `zero_grad()`, no `p.grad = None`): each step applies the sum of all gradients so far
"""),
    )
    not_flagged = (
        Example("""
import torch
def train_step(batch):
    loss = model(batch).loss
    loss.backward()
    optimizer.step()
    reset_gradients(optimizer)
    return loss
for batch in loader:
    train_step(batch)
"""),
        Example("""
import torch
from ignite.engine import Engine

def train_step(engine, batch):
    classifier.train()
    optimizer.zero_grad()
    images, labels = batch
    loss_fn(classifier(images), labels).backward()
    optimizer.step()

Engine(train_step).run(train_loader, max_epochs=5)
"""),
        Example("""
import torch
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accumulation_steps
    loss.backward()
    if (step + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
"""),
        Example("""
import torch
for x, y in loader:
    model.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""),
        Example("""
import torch
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    for p in model.parameters():
        p.grad = None
"""),
        Example("""
import torch
optimizer = torch.optim.LBFGS(model.parameters())
def closure():
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    return loss
for i in range(20):
    optimizer.step(closure)
"""),
        Example("""
import torch
for epoch in range(epochs):
    optimizer.zero_grad()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
    optimizer.step()
"""),
        Example("""
import torch
for batch in loader:
    loss = model(batch).loss
    loss.backward()
    optimizer.step()
    reset_gradients(optimizer)
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        step_function = self.ctx.iteration.engine_step(node)  # `Engine(update_fn)`: runs it every iteration
        if step_function is not None:
            self.check_iteration(step_function)

    def check_iteration(self, iteration: Iteration) -> None:
        steps = iteration.of("step", "scaler_step", nested=False)
        if not steps or not iteration.of("backward") or iteration.of("zero_grad"):
            return
        step = steps[0]
        optimizer = step.argument if step.kind == "scaler_step" else step.target
        if optimizer is None or self._escapes(iteration.loop, optimizer, {id(e.node) for e in iteration.events}) \
                or id(step.node) in self._reported:
            return
        self._reported.add(id(step.node))
        backward = iteration.of("backward")[0]
        backward_code = self.ctx.snippet(backward.node, 40)
        if iteration.engine is not None:
            where = f"`{iteration.loop.name.value}`"
            runs = (f"on every call of `{iteration.loop.name.value}`, which `{self.ctx.snippet(iteration.engine, 50)}` "
                    "runs once per iteration,")
        else:
            where = "the loop"
            runs = f"on every iteration of `{loop_header(self.ctx, iteration.loop)}`"
        self.report(step.node, f"`{self.ctx.snippet(step.node, 30)}` without `{optimizer}.zero_grad()` in {where}: "
                               "gradients pile up",
                    help=f"call `{optimizer}.zero_grad()` once per iteration, before `{backward_code}` or right "
                         f"after `{self.ctx.snippet(step.node, 30)}`",
                    note=f"`{backward_code}` adds into `.grad` {runs} and nothing resets it (no model "
                         "`zero_grad()`, no `p.grad = None`): each step applies the sum of all gradients so far")

    def _escapes(self, body: cst.For | cst.While | cst.FunctionDef, optimizer: str, events: set[int]) -> bool:
        """Is the optimizer handed to a call this file cannot see into (which may zero it), in the loop or
        in a same-file function it calls (a step function)?"""
        calls = self.ctx.calls
        for call in (c for unit in (body, *calls.called_functions(body)) for c in self.ctx.definitions.calls_in(unit)):
            if id(call) in events or calls.targets(call) or self.ctx.names.callee(call) in _KEEP_GRADIENTS:
                continue
            if any(dotted(arg.value) == optimizer for arg in call.args):
                return True
        return False

