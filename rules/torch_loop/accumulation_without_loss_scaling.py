"""LL702 accumulation-without-loss-scaling: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.iteration import Event, Iteration
from lintloop.analysis.nodes import call_name, dotted, positional_args, receiver, walk
from lintloop.rule import Example, LoopRule
from lintloop.screen import Needs


def counter_guard(test: cst.BaseExpression) -> bool:
    """`(i + 1) % k == 0`, `step % accum != 0`, `not step % k`, possibly within `or`/`and`."""
    for node in walk(test):
        if isinstance(node, cst.Comparison) and isinstance(node.left, cst.BinaryOperation) \
                and isinstance(node.left.operator, cst.Modulo):
            return True
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not) \
                and isinstance(node.expression, cst.BinaryOperation) and isinstance(node.expression.operator, cst.Modulo):
            return True
    return False


def _divisor(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """The k of a counter guard's `% k` (`accumulation_steps` in `(i + 1) % accumulation_steps == 0`), for
    the message."""
    return next((node.right for node in walk(test)
                 if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)), None)


class AccumulationWithoutLossScaling(LoopRule):
    code = "LL702"
    name = "accumulation-without-loss-scaling"
    description = "gradient accumulation without dividing the loss"
    frameworks = ("pt",)
    needs = Needs(file=(("call:backward",),), statement=(("call:step",),))
    probe = "effect"
    summary = ("Gradient accumulation: `backward()` on every iteration, `optimizer.step()` only every k-th "
               "(under `% k == 0` or another counter guard), and neither the loss is divided by k (the number of "
               "micro-batches) before `backward()` nor the gradients before the step.")
    why = ("Gradients add up over the k backward passes, so the step applies k times the average gradient: the "
           "effective learning rate is k times the configured one, and it changes whenever k does.")
    symptom = ("LL702_bad.py (k = 4): each of the 4 backward passes before a step backpropagates the "
               "loss function's undivided output, and the gradients add up: the step applies their sum, k times their "
               "mean, so the update is as large as with a k times larger learning rate (step 1 gradient norm 11.7 "
               "against 2.93 with the loss divided by k); training is unstable at a learning rate that works without "
               "accumulation. Nothing warns.")
    remedy = ("Divide the loss by the number of accumulation steps before `backward()` "
              "(`(loss / accum_steps).backward()`), or use `accelerator.accumulate(model)` with "
              "`accelerator.backward(loss)`, which scale for you.")
    flagged = (
        Example("""
import torch
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
""", expect="""
6:9-6:25 `optimizer.step()` applies the sum of the accumulated gradients, not their mean
    help: divide the loss by `accumulation_steps` before `loss.backward()`
    note: it runs only when `(i + 1) % accumulation_steps == 0` but `loss.backward()` runs every
        iteration on an undivided loss: for k micro-batches the update is k times their mean gradient,
        as with a k times larger learning rate
"""),
        Example("""
import torch
scaler = torch.amp.GradScaler("cuda")
for step, batch in enumerate(train_dataloader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(**batch).loss
    scaler.scale(loss).backward()
    if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""", expect="""
8:9-8:31 `scaler.step(optimizer)` applies the sum of the accumulated gradients, not their mean
    help: divide the loss by `args.gradient_accumulation_steps` before `scaler.scale(loss).backward()`
    note: it runs only when `step % args.gradient_accumulation_steps == 0 or s…` but
        `scaler.scale(loss).backward()` runs every iteration on an undivided loss: for k micro-batches
        the update is k times their mean gradient, as with a k times larger learning rate
"""),
        Example("""
import torch
class Trainer:
    def train_step(self, batch):
        loss = self.compute_loss(batch)
        loss.backward()
        return loss

    def fit(self, loader):
        for i, batch in enumerate(loader):
            self.train_step(batch)
            if i % self.accum == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
""", expect="""
12:17-12:38 `self.optimizer.step()` applies the sum of the accumulated gradients, not their mean
    help: divide the loss by `self.accum` before `loss.backward()`
    note: it runs only when `i % self.accum == 0` but `loss.backward()` runs every iteration on an
        undivided loss: for k micro-batches the update is k times their mean gradient, as with a k times
        larger learning rate
"""),
    )
    not_flagged = (
        Example("""
import torch
for i, (real, _) in enumerate(loader):
    if i % d_every == 0:
        opt_d.zero_grad()
        fake = netg(torch.randn(real.size(0), nz)).detach()
        loss_d = netd(fake).mean() - netd(real).mean()
        loss_d.backward()
        opt_d.step()
    if i % g_every == 0:
        opt_g.zero_grad()
        loss_g = -netd(netg(torch.randn(real.size(0), nz))).mean()
        loss_g.backward()
        opt_g.step()
"""),
        Example("""
import torch
def average_grad(p):
    p.grad /= accum
def average_grads(model):
    for p in model.parameters():
        average_grad(p)
for i, (x, y) in enumerate(loader):
    criterion(model(x), y).backward()
    if (i + 1) % accum == 0:
        average_grads(model)
        optimizer.step()
        optimizer.zero_grad()
"""),
        Example("""
import torch
def average_grad(p):
    p.grad /= accum
for i, (x, y) in enumerate(loader):
    criterion(model(x), y).backward()
    if (i + 1) % accum == 0:
        for p in model.parameters():
            average_grad(p)
        optimizer.step()
        optimizer.zero_grad()
"""),
        Example("""
import torch
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accumulation_steps
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
        Example("""
import torch
for step, batch in enumerate(train_dataloader):
    with accelerator.accumulate(model):
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
"""),
        Example("""
import torch
for step, batch in enumerate(train_dataloader):
    loss = model(**batch).loss
    loss = loss / args.gradient_accumulation_steps
    accelerator.backward(loss)
    if step % args.gradient_accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
        Example("""
import torch
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    if (i + 1) % accum == 0:
        for p in model.parameters():
            p.grad /= accum
        optimizer.step()
        optimizer.zero_grad()
"""),
        Example("""
import torch
for i, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    if i % 100 == 0:
        scheduler.step()
"""),
        Example("""
import torch
from torchtune import training
for idx, batch in enumerate(dataloader):
    current_num_tokens = (batch["labels"] != ignore_index).sum()
    num_tokens += current_num_tokens
    current_loss = loss_step(batch)
    current_loss.backward()
    if (idx + 1) % gradient_accumulation_steps == 0:
        training.scale_grads(model, 1 / num_tokens)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
"""),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reported: set[int] = set()

    def check_iteration(self, iteration: Iteration) -> None:
        events = [e for e in iteration.events if not e.loops]
        for step in (e for e in events if e.kind in ("step", "scaler_step")):
            guard = next((g for g, in_else in step.guards
                          if not in_else and isinstance(g, cst.If) and counter_guard(g.test)), None)
            if guard is None or id(step.node) in self._reported:
                continue
            # The backwards whose gradients carry over to the guarded step: those run every iteration (one under
            # a counter guard of its own belongs to another update, as in a GAN's alternating steps).
            backwards = [e for e in events if e.kind == "backward"
                         and not any(isinstance(g, cst.If) and counter_guard(g.test) for g, _ in e.guards)]
            if not backwards or any(b.via == "accelerator" or self._scaled(b) for b in backwards) \
                    or self._cleared_before(step, guard, events) or self._grads_divided(iteration):
                continue
            self._reported.add(id(step.node))
            step_code, backward_code = self.ctx.snippet(step.node, 30), self.ctx.snippet(backwards[0].node, 40)
            divisor = _divisor(guard.test)
            steps = f"`{self.ctx.snippet(divisor, 40)}`" if divisor is not None else "the number of accumulation steps"
            self.report(step.node, f"`{step_code}` applies the sum of the accumulated gradients, not their mean",
                        help=f"divide the loss by {steps} before `{backward_code}`",
                        note=f"it runs only when `{self.ctx.snippet(guard.test, 50)}` but `{backward_code}` runs every "
                             "iteration on an undivided loss: for k micro-batches the update is k times their mean "
                             "gradient, as with a k times larger learning rate")

    @staticmethod
    def _cleared_before(step: Event, guard: cst.If, events: list[Event]) -> bool:
        """Does the guarded block zero the stepped optimizer's gradients before its step (`if i % k == 0:`
        `opt.zero_grad()`, `loss.backward()`, `opt.step()`: a step every k iterations on one fresh
        gradient, nothing accumulated)?"""
        stepped = step.argument if step.kind == "scaler_step" else step.target
        for event in events[:events.index(step)]:
            if event.kind == "zero_grad" and any(g is guard for g, _ in event.guards) \
                    and event.target in (stepped, None):
                return True
        return False

    def _scaled(self, backward: Event) -> bool:
        """Is the backpropagated loss divided (or multiplied by a factor) before `backward()`?"""
        call = backward.node
        if not isinstance(call, cst.Call):
            return True
        if backward.via is None and call_name(call) == "backward" and isinstance(call.func, cst.Attribute):
            loss = call.func.value  # `loss.backward()`, `scaler.scale(loss).backward()`
        else:  # `accelerator.backward(loss)`, `torch.autograd.backward(loss)`
            loss = positional_args(call)[0] if positional_args(call) else None
        if isinstance(loss, cst.Call) and call_name(loss) == "scale" and positional_args(loss):
            loss = positional_args(loss)[0]  # `scaler.scale(loss)`
        if loss is None:
            return True  # cannot tell
        values: list[cst.CSTNode] = [loss]
        for binding in self.ctx.flow.feeding_bindings(loss, call):
            if binding.augmented and isinstance(binding.node, cst.AugAssign) \
                    and isinstance(binding.node.operator, (cst.DivideAssign, cst.MultiplyAssign)):
                return True
            if binding.value is not None:
                values.append(binding.value)
        for value in values:
            for node in walk(value):
                if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Divide, cst.Multiply)):
                    return True
                if isinstance(node, cst.Call) and (call_name(node) in ("div", "div_", "mul", "mul_")
                                                   or self.ctx.calls.targets(node)):
                    return True  # a same-file function computes it: it may divide
        return False

    def _grads_divided(self, iteration: Iteration) -> bool:
        """`p.grad /= k`, `p.grad.div_(k)`, `p.grad.data.mul_(1 / k)` in the iteration or in a function of
        this file it calls (`scale_grads(p)`, also through other functions), or a call this file cannot see
        into that says it scales gradients (`training.scale_grads(model, 1 / num_tokens)`)."""
        body = list(walk(iteration.loop.body))
        called = self.ctx.calls.called_functions(iteration.loop)
        for node in body + [n for fn in called for n in walk(fn.body)]:
            if isinstance(node, cst.Call) and not self.ctx.calls.targets(node) \
                    and "grad" in (call_name(node) or "") and any(w in (call_name(node) or "") for w in ("scale", "div")):
                return True
            if isinstance(node, cst.AugAssign) and ".grad" in f"{dotted(node.target)}." \
                    and isinstance(node.operator, (cst.DivideAssign, cst.MultiplyAssign)):
                return True
            if isinstance(node, cst.Call) and call_name(node) in ("div_", "mul_") and receiver(node) is not None \
                    and ".grad" in f"{dotted(receiver(node))}.":
                return True
        return False
