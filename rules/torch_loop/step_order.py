"""LL706 step-order: the rule, its documentation and its examples."""

from __future__ import annotations

from lintloop.analysis.iteration import Event, Iteration, loop_header
from lintloop.rule import Example, LoopRule
from lintloop.screen import Needs


class StepOrder(LoopRule):
    code = "LL706"
    name = "step-order"
    description = "`zero_grad`, `backward` and `step` in the wrong order"
    frameworks = ("pt",)
    needs = Needs(file=(("call:backward", "call:manual_backward"),), statement=(("call:step", "call:zero_grad"),))
    probe = "effect"
    summary = ("In one iteration: `zero_grad()` between `backward()` and `step()` (the step sees zeroed or "
               "missing gradients), or `step()` before any `backward()` (the step applies the previous "
               "iteration's gradients, or none).")
    why = ("`optimizer.step()` applies whatever is in `.grad` at that moment. Zeroing between `backward()` and "
           "`step()` throws the fresh gradients away; stepping before `backward()` applies last iteration's "
           "gradients (and nothing at the first step).")
    symptom = ("LL706_bad.py: with `zero_grad()` between `backward()` and `step()`, SGD, Adam and "
               "AdamW leave every parameter unchanged (measured in torch 2.13); the loss never moves and "
               "nothing warns.")
    remedy = "Order each iteration as `zero_grad()` → forward → loss → `backward()` → `step()`."
    flagged = (
        Example("""
import torch
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.zero_grad()
    optimizer.step()
""", expect="""
5:5-5:26 `optimizer.zero_grad()` before `optimizer.step()` discards the fresh gradients
    help: move `optimizer.zero_grad()` before the forward pass or after `optimizer.step()`
    note: it runs after `loss.backward()`: the step sees zeroed (or None) gradients and the parameters
        do not move
"""),
        Example("""
import torch
for x, y in loader:
    optimizer.zero_grad()
    optimizer.step()
    loss = criterion(model(x), y)
    loss.backward()
""", expect="""
4:5-4:21 `optimizer.step()` runs before any `backward()` in the iteration
    help: call `optimizer.step()` after `backward()`
    note: in `for x, y in loader` it applies the previous iteration's gradients (none at the first step)
"""),
        Example("""
import torch
def update(policy, optimizer, batch):
    loss = policy.loss(batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
    policy.zero_grad()
    optimizer.step()

for epoch in range(n_epochs):
    for batch in buffer.sample():
        update(policy, optimizer, batch)
""", expect="""
6:5-6:23 `policy.zero_grad()` before `optimizer.step()` discards the fresh gradients
    help: move `policy.zero_grad()` before the forward pass or after `optimizer.step()`
    note: it runs after `loss.backward()`: the step sees zeroed (or None) gradients and the parameters
        do not move
"""),
    )
    not_flagged = (
        Example("""
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""),
        Example("""
import torch
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
        Example("""
import torch
for real, _ in loader:
    optimizer_d.zero_grad()
    loss_d = d_loss(netD(real), netD(netG(noise).detach()))
    loss_d.backward()
    optimizer_d.step()
    optimizer_g.zero_grad()
    loss_g = g_loss(netD(netG(noise)))
    loss_g.backward()
    optimizer_g.step()
"""),
        Example("""
import torch
for x, y in loader:
    loss_g.backward()
    optimizer_d.zero_grad()
    optimizer_g.step()
"""),
        Example("""
import torch
for i, batch in enumerate(loader):
    if i > 0 and i % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
    loss = model(batch).loss
    loss.backward()
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[int] = set()

    def check_iteration(self, iteration: Iteration) -> None:
        events = [e for e in iteration.events if not e.loops]
        steps = [(index, e) for index, e in enumerate(events) if e.kind in ("step", "scaler_step")]
        if not steps:
            return
        one_optimizer = len({_optimizer(s) for _, s in steps}) == 1
        # Whether a `backward` comes at or after each position (read once, not once per step).
        backward_from = [False] * (len(events) + 1)
        for index in range(len(events) - 1, -1, -1):
            backward_from[index] = backward_from[index + 1] or events[index].kind == "backward"
        for index, step in steps:
            backward = next((b for b in range(index - 1, -1, -1)
                             if events[b].kind == "backward" and not events[b].is_exclusive_with(step)), None)
            if backward is not None:
                zeroing = self._zeroing_after(iteration, events[backward + 1:index], step, one_optimizer)
                if zeroing is not None:
                    zero_code, step_code = self.ctx.snippet(zeroing.node, 30), self.ctx.snippet(step.node, 30)
                    self._report(zeroing, f"`{zero_code}` before `{step_code}` discards the fresh gradients",
                                 help=f"move `{zero_code}` before the forward pass or after `{step_code}`",
                                 note=f"it runs after `{self.ctx.snippet(events[backward].node, 40)}`: the step sees "
                                      "zeroed (or None) gradients and the parameters do not move")
            elif not step.guards and backward_from[index]:
                step_code = self.ctx.snippet(step.node, 30)
                self._report(step, f"`{step_code}` runs before any `backward()` in the iteration",
                             help=f"call `{step_code}` after `backward()`",
                             note=f"in `{loop_header(self.ctx, iteration.loop)}` it applies the previous iteration's "
                                  "gradients (none at the first step)")

    def _zeroing_after(self, iteration: Iteration, between: list[Event], step: Event,
                       one_optimizer: bool) -> Event | None:
        """A `zero_grad` of the stepped optimizer (or of a model, with one optimizer) among the events
        `between` a backward and the step."""
        optimizer = _optimizer(step)
        for event in between:
            if event.kind == "backward":
                return None
            if event.kind != "zero_grad" or event.is_exclusive_with(step) \
                    or self.ctx.iteration.ends_iteration(event, iteration):
                continue  # e.g. `except OOM: optimizer.zero_grad(); continue`
            if event.target == optimizer or (one_optimizer and self.ctx.iteration.role_of_name(event.target) != "optimizer"):
                return event
        return None

    def _report(self, event: Event, message: str, *, help: str, note: str) -> None:
        if id(event.node) not in self._reported:
            self._reported.add(id(event.node))
            self.report(event.node, message, help=help, note=note)


def _optimizer(step: Event) -> str | None:
    return step.argument if step.kind == "scaler_step" else step.target
