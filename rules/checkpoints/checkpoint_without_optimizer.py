"""LL801 checkpoint-without-optimizer: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.syntax import (argument, call_name, dotted, keyword_arg, positional_args, receiver,
                                     string_value, walk)
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

# Calls that save a full training state, optimizer included (Accelerate, DeepSpeed, Lightning's Trainer).
_FULL_STATE_SAVES = {"save_state", "save_checkpoint"}
# Importing these means a trainer writes resumable checkpoints (with optimizer state) itself.
_TRAINER_PACKAGES = ("pytorch_lightning", "lightning")


def _is_optimizer(expr: cst.BaseExpression | None) -> bool:
    """`optimizer`, `self.optim`, `opt`, `opt_g`, `d_opt`: names that hold an optimizer."""
    label = (dotted(expr) or "").lower() if expr is not None else ""
    last = label.rsplit(".", 1)[-1]
    return "optim" in last or last == "opt" or last.startswith("opt_") or last.endswith("_opt")


def _holds_state_dict(node: cst.CSTNode) -> bool:
    return any(isinstance(n, cst.Call) and call_name(n) == "state_dict" for n in walk(node))


def _literal_zero_or_absent(expr: cst.BaseExpression | None) -> bool:
    return expr is None or isinstance(expr, (cst.Integer, cst.Float)) and float(expr.value) == 0


def _is_auxiliary(expr: cst.BaseExpression | None) -> bool:
    """A learning-rate scheduler or a GradScaler: its state is not the model's."""
    last = (dotted(expr) or "").lower().rsplit(".", 1)[-1] if expr is not None else ""
    return "sched" in last or "scaler" in last


class CheckpointWithoutOptimizer(Rule):
    code = "LL801"
    name = "checkpoint-without-optimizer"
    # The TensorFlow side (`tf.train.Checkpoint` without the optimizers the file trains with) is a second
    # check dispatched from `visit_Call`; "tf" joins `frameworks` with it.
    frameworks = ("pt",)
    # Every unit that may save an optimizer's state is selected too: one anywhere in the file clears every finding.
    needs = Needs(file=(("call:save",), ("call:state_dict",)),
                  # Every unit that may save an optimizer's state or build an optimizer is parsed: both are
                  # file-wide questions.
                  statement=(("call:save", "call:state_dict", "call:save_state", "call:save_checkpoint",
                              "name:optim", "name:SGD"),))
    summary = ("`torch.save(model.state_dict(), ...)` — or a dict of state dicts without the optimizer's — "
               "inside a training loop that steps an optimizer (or a function called from one), when nothing "
               "in the file saves the optimizer's state (`optimizer.state_dict()`, `accelerator.save_state`, "
               "a Lightning Trainer, ...).")
    why = ("A checkpoint written during training is what a run resumes from. Without the optimizer's state "
           "(Adam's moment estimates and step counts, SGD momentum buffers), a resumed run restarts the "
           "optimizer from zero: Adam's bias correction starts over, momentum is lost, and learning-rate "
           "warm-up logic keyed on the optimizer's step restarts, so the loss jumps after every resume and the "
           "run is not the run it continues.")
    symptom = ("Nothing fails. tests/fixtures/LL801_bad.py trains 4 epochs of Adam steps saving "
               "`model.state_dict()` each epoch, then resumes from the epoch-1 checkpoint and trains epochs 2-3 "
               "again on the same batches: final loss 0.31793 instead of 0.36810, parameters off by up to "
               "1.33e-01. LL801_good.py saves and reloads the optimizer's state too: the same loss, parameter "
               "difference 0.00e+00.")
    remedy = ("Save `{\"model\": model.state_dict(), \"optimizer\": optimizer.state_dict(), \"epoch\": epoch}` (and "
              "the LR scheduler's and GradScaler's state dicts when used), and load them all when resuming. A "
              "best-weights snapshot beside such a resume checkpoint is fine.")
    flagged = (
        Example("""
import torch
for epoch in range(epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    torch.save(model.state_dict(), f"ckpt_{epoch}.pt")
"""),
        Example("""
import torch
def save_checkpoint(model, epoch, path):
    torch.save({"epoch": epoch, "model_state_dict": model.state_dict()}, path)
def train(model, opt, loader, epochs):
    for epoch in range(epochs):
        for batch in loader:
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        save_checkpoint(model, epoch, "last.pt")
"""),
        Example("""
import torch as th
from torch import save
class Trainer:
    def fit(self, loader):
        for step, batch in enumerate(loader):
            self.optimizer.zero_grad()
            self.model(batch).loss.backward()
            self.optimizer.step()
            if step % 1000 == 0:
                state = {"model": self.model.module.state_dict(), "scheduler": self.scheduler.state_dict()}
                save(state, self.ckpt_path)
"""),
    )
    not_flagged = (
        Example("""
import torch
model = build_model()
model.load_state_dict(torch.load("trained.pt"))
model.eval()
for name, quantized in variants(model):
    torch.save(quantized.state_dict(), f"{name}.pt")
"""),
        Example("""
import torch
for epoch in range(epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    if val_acc > best:
        torch.save(model.state_dict(), "best.pt")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "last.pt")
"""),
        Example("""
import torch
for epoch in range(epochs):
    train_one_epoch(model, optimizer, loader)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    accelerator.save_state(output_dir)
    torch.save(model.state_dict(), "weights.pt")
"""),
        Example("""
import torch
for epoch in range(epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
torch.save(model.state_dict(), "final.pt")
"""),
        Example("""
import torch
class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train(self, loader, epochs):
        for epoch in range(epochs):
            for x, y in loader:
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
            torch.save({"MODEL_STATE": self.model.state_dict(), "EPOCHS_RUN": epoch}, "snapshot.pt")
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.names.callee(node) == "torch.save":
            self._check_torch_save(node)

    def _check_torch_save(self, call: cst.Call) -> None:
        saved = argument(call, 0, "obj")
        if saved is None:
            return
        value = self.ctx.flow.resolve_value(saved, call)
        states = [c for c in walk(value) if isinstance(c, cst.Call) and call_name(c) == "state_dict"]
        if not states or any(_is_optimizer(receiver(c)) for c in states):
            return
        model_states = [c for c in states if not _is_auxiliary(receiver(c))]
        if not model_states or not self._in_training_loop(call, depth=0):
            return
        if self._optimizer_state_saved() or self._optimizers_keep_no_state():
            return
        self.report(call, f"this checkpoint, written in a training loop, saves `{self.ctx.snippet(model_states[0])}` "
                          "but not the optimizer's state, and nothing in this file saves it: a run resumed from it "
                          "restarts the optimizer (Adam moments, momentum, step counts) from zero; save "
                          "`optimizer.state_dict()` with it")

    def _in_training_loop(self, node: cst.CSTNode, depth: int) -> bool:
        """In a loop that steps an optimizer, or in a function called (up to 3 calls deep) from one."""
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, (cst.For, cst.While)) and self.ctx.torch.steps_optimizer(ancestor):
                return True
            if isinstance(ancestor, cst.FunctionDef):
                return depth < 3 and any(self._in_training_loop(site, depth + 1)
                                         for site in self.ctx.calls.call_sites.get(ancestor, ()))
        return False

    def _optimizers_keep_no_state(self) -> bool:
        """Every optimizer the file builds is plain SGD (no momentum) and no scheduler is built: resuming
        from the model alone loses nothing (the ddp-tutorial-series `SGD(params, lr=1e-3)`)."""
        built = [self.ctx.names.callee(c) or "" for c in self.ctx.nodes(cst.Call)]
        optimizers = [(c, name) for c, name in zip(self.ctx.nodes(cst.Call), built) if name.startswith("torch.optim.")]
        if not optimizers or any(name.startswith("torch.optim.lr_scheduler.") for _, name in optimizers):
            return False
        return all(name == "torch.optim.SGD" and len(positional_args(c)) <= 2 and _literal_zero_or_absent(
            keyword_arg(c, "momentum")) for c, name in optimizers)

    def _optimizer_state_saved(self) -> bool:
        """Anywhere in the file: an optimizer's `state_dict()`, a full-state save, a trainer that checkpoints,
        or a state dict stored under an `"optimizer..."` key (`{"optim": opt_state.state_dict()}`,
        `ckpt["optimizer"] = o.state_dict()`)."""
        if any(module.split(".")[0] in _TRAINER_PACKAGES for module in self.ctx.names.imports.values()):
            return True
        for call in self.ctx.nodes(cst.Call):
            name = call_name(call)
            if name == "state_dict" and _is_optimizer(receiver(call)) or name in _FULL_STATE_SAVES and (
                    not self.ctx.calls.local_functions(call.func)):
                return True
        keys = [e.key for d in self.ctx.nodes(cst.Dict) if _holds_state_dict(d)
                for e in d.elements if isinstance(e, cst.DictElement)]
        keys += [t.target.slice[0].slice.value for assign in self.ctx.nodes(cst.Assign)
                 if _holds_state_dict(assign.value) for t in assign.targets
                 if isinstance(t.target, cst.Subscript) and isinstance(t.target.slice[0].slice, cst.Index)]
        return any("optim" in (string_value(k) or "").lower() for k in keys)
