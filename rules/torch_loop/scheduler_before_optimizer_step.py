"""LL707 scheduler-before-optimizer-step: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.iteration import Event, Iteration, loop_header
from lintloop.analysis.nodes import names_in
from lintloop.rule import Example, LoopRule
from lintloop.screen import Needs

# Schedulers whose `step()` does not take the optimizer's step count into account.
_METRIC_SCHEDULERS = {"torch.optim.lr_scheduler.ReduceLROnPlateau"}


class SchedulerBeforeOptimizerStep(LoopRule):
    code = "LL707"
    name = "scheduler-before-optimizer-step"
    description = "`scheduler.step()` before `optimizer.step()`"
    frameworks = ("pt",)
    needs = Needs(file=(("call:backward", "call:manual_backward"),), statement=(("call:step",),))
    probe = "error (warning)"
    summary = ("`scheduler.step()` runs before `optimizer.step()` in the same iteration (a `torch.optim.lr_scheduler` "
               "scheduler, or one from `transformers.get_*_schedule*`): the first learning rate of the schedule is "
               "skipped.")
    why = ("Since PyTorch 1.1 a scheduler's `step()` is meant to follow the optimizer's: stepping it first moves "
           "to the second value of the schedule before the first was ever used.")
    symptom = ("LL707_bad.py: PyTorch warns once, at the `scheduler.step()` line: \"UserWarning: "
               "Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and later, you "
               "should call them in the opposite order: `optimizer.step()` before `lr_scheduler.step()`.  Failure to "
               "do this will result in PyTorch skipping the first value of the learning rate schedule.\" — and the "
               "learning rates used are 0.5, 0.25, … instead of 1.0, 0.5, … (measured, torch 2.13).")
    remedy = "Call `scheduler.step()` after `optimizer.step()` (at the end of the iteration or of the epoch)."
    flagged = (
        Example("""
import torch
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
for epoch in range(90):
    scheduler.step()
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
""", expect="""
5:5-5:21 `scheduler.step()` before `optimizer.step()` skips the first learning rate
    help: call `scheduler.step()` after `optimizer.step()`
    note: it runs before the optimizer's step in each iteration of `for epoch in range(90)`: the
        schedule's first value is never used; PyTorch warns "Detected call of `lr_scheduler.step()`
        before `optimizer.step()`"
"""),
        Example("""
import torch
from torch.optim.lr_scheduler import OneCycleLR as OneCycle
sched = OneCycle(opt, max_lr=0.1, total_steps=1000)
for x, y in loader:
    opt.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    sched.step()
    opt.step()
""", expect="""
8:5-8:17 `sched.step()` before `opt.step()` skips the first learning rate
    help: call `sched.step()` after `opt.step()`
    note: it runs before the optimizer's step in each iteration of `for x, y in loader`: the schedule's
        first value is never used; PyTorch warns "Detected call of `lr_scheduler.step()` before
        `optimizer.step()`"
"""),
        Example("""
import torch
from transformers import get_linear_schedule_with_warmup
lr_scheduler = get_linear_schedule_with_warmup(optimizer, 100, 1000)
def train_epoch(model, loader):
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
for epoch in range(3):
    lr_scheduler.step()
    train_epoch(model, train_loader)
""", expect="""
11:5-11:24 `lr_scheduler.step()` before `optimizer.step()` skips the first learning rate
    help: call `lr_scheduler.step()` after `optimizer.step()`
    note: it runs before the optimizer's step in each iteration of `for epoch in range(3)`: the
        schedule's first value is never used; PyTorch warns "Detected call of `lr_scheduler.step()`
        before `optimizer.step()`"
"""),
    )
    not_flagged = (
        Example("""
import torch
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
for epoch in range(90):
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    scheduler.step()
"""),
        Example("""
import torch
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
for epoch in range(90):
    scheduler.step(val_loss)
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
"""),
        Example("""
import torch
import timm.scheduler
lr_scheduler = timm.scheduler.create_scheduler(args, optimizer)
for epoch in range(epochs):
    lr_scheduler.step(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
"""),
        Example("""
import torch
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup)
for epoch in range(epochs):
    if epoch > 0:
        scheduler.step()
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[int] = set()

    def check_iteration(self, iteration: Iteration) -> None:
        events = iteration.events
        for index, event in enumerate(events):
            if event.kind in ("step", "scaler_step"):
                return  # the optimizer has stepped first in this iteration
            if event.kind == "scheduler_step" and not event.loops and self._step_counting(event) \
                    and not self._skips_first_iteration(event, iteration) \
                    and any(e.kind in ("step", "scaler_step") for e in events[index + 1:]) \
                    and id(event.node) not in self._reported:
                self._reported.add(id(event.node))
                step = next(e for e in events[index + 1:] if e.kind in ("step", "scaler_step"))
                scheduler_code, step_code = self.ctx.snippet(event.node, 28), self.ctx.snippet(step.node, 28)
                self.report(event.node, f"`{scheduler_code}` before `{step_code}` skips the first learning rate",
                            help=f"call `{scheduler_code}` after `{step_code}`",
                            note=f"it runs before the optimizer's step in each iteration of "
                                 f"`{loop_header(self.ctx, iteration.loop)}`: the schedule's first value is never used; "
                                 "PyTorch warns \"Detected call of "
                                 "`lr_scheduler.step()` before `optimizer.step()`\"")

    def _step_counting(self, event: Event) -> bool:
        """Is it a scheduler whose steps follow the optimizer's: torch's `LRScheduler`s (not
        ReduceLROnPlateau), or the `LambdaLR`s transformers builds? Unknown ones (timm's take an epoch) are not."""
        made = self.ctx.iteration.constructor(event.target, event.node)
        if made is None:
            return False
        qualname = made[1]
        return qualname not in _METRIC_SCHEDULERS and (
            qualname.startswith("torch.optim.lr_scheduler.")
            or qualname.startswith("transformers.") and "schedule" in qualname)

    def _skips_first_iteration(self, event: Event, iteration: Iteration) -> bool:
        """`if epoch > 0: scheduler.step()`: a guard on the loop's own variable."""
        loop = iteration.loop
        if not isinstance(loop, cst.For) or not event.guards:
            return False
        variables = names_in(loop.target)
        return any(variables & names_in(guard.test) for guard, _ in event.guards if isinstance(guard, cst.If))
