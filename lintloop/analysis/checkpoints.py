"""TensorFlow checkpoints: what a `tf.train.Checkpoint` holds, whether this file saves it, and the
optimizers the code around it trains with (LL801 asks whether every such optimizer is held)."""

from __future__ import annotations

from typing import Callable

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.nodes import argument, call_name, dotted, names_an_optimizer, positional_args, receiver

CHECKPOINTS = {"tensorflow.train.Checkpoint", "tensorflow.compat.v1.train.Checkpoint"}


def last_name(expr: cst.BaseExpression | None) -> str:
    """`self._g_opt` -> `g_opt`: the attribute or name that holds a value, private prefix dropped."""
    return ((dotted(expr) or "").rsplit(".", 1)[-1].lstrip("_")) if expr is not None else ""


class TFCheckpoints(Analysis):
    asks = frozenset({"calls", "definitions", "flow", "training"})

    def trained_near(self, checkpoint: cst.Call) -> list[cst.Call]:
        """The optimizer steps of the code a checkpoint belongs to, and of the functions that code calls: the
        whole file for a module-level checkpoint, the class's methods for one kept as `self.x`, else its own
        function (a test method's local checkpoint is that test's business)."""
        ctx = self.ctx
        owner: cst.CSTNode | None = next((a for a in ctx.ancestors(checkpoint) if isinstance(a, cst.FunctionDef)), None)
        if owner is None:
            return self.ctx.training.optimizer_updates
        bound = ctx.parents.get(checkpoint)
        if isinstance(bound, cst.Assign) and any((dotted(t.target) or "").startswith("self.") for t in bound.targets):
            owner = next((a for a in ctx.ancestors(owner) if isinstance(a, cst.ClassDef)), owner)
        functions = [f for f in ctx.nodes(cst.FunctionDef) if ctx.is_inside(f, owner)]
        functions += [f for fn in list(functions) for f in ctx.calls.called_functions(fn)]
        return [step for step in self.ctx.training.optimizer_updates if any(ctx.is_inside(step, f) for f in functions)]

    def saved_here(self, checkpoint: cst.Call) -> bool:
        """`tf.train.Checkpoint(...).save(...)`, or `.save` / `.write` of a name holding it, or a
        `tf.train.CheckpointManager` built on it: a checkpoint only restored (pretrained weights) is not checked."""
        parent = self.ctx.parents.get(checkpoint)
        if isinstance(parent, cst.Attribute) and parent.attr.value in ("save", "write"):
            return True
        if not isinstance(parent, cst.Assign):
            return False
        return any(self._saves(call, lambda held, at: self.ctx.flow.resolve_value(held, at) is checkpoint)
                   for call in self.ctx.nodes(cst.Call))

    def _saves(self, call: cst.Call, holds: Callable[[cst.BaseExpression, cst.CSTNode], bool], depth: int = 0) -> bool:
        """Does `call` save what `holds` names: `ckpt.save(...)`, `CheckpointManager(ckpt, ...)`, or a same-file
        helper given it that does (`save_checkpoint(strategy, ckpt, model_dir)`)?"""
        name = call_name(call)
        held = (receiver(call) if name in ("save", "write") else
                argument(call, 0, "checkpoint") if name == "CheckpointManager" else None)
        if isinstance(held, (cst.Name, cst.Attribute)) and holds(held, call):
            return True
        if depth > 1:
            return False
        for function in self.ctx.calls.local_functions(call.func):
            params = [p.name.value for p in function.params.params if p.name.value != "self"]
            given = {params[i] for i, arg in enumerate(positional_args(call)) if i < len(params) and holds(arg, call)}
            given |= {a.keyword.value for a in call.args if a.keyword is not None and holds(a.value, call)}
            if given and any(self._saves(inner, lambda h, _: isinstance(h, cst.Name) and h.value in given, depth + 1)
                             for inner in self.ctx.definitions.calls_in(function)):
                return True
        return False

    @computed
    def checkpoints(self) -> list[cst.Call]:
        return [call for call in self.ctx.nodes(cst.Call) if self.ctx.names.callee(call) in CHECKPOINTS]

    def items(self, checkpoint: cst.Call) -> list[cst.BaseExpression] | None:
        """What a checkpoint holds: its arguments and the attributes later assigned to it
        (`ckpt.optimizer = opt`); None when it cannot be seen (`**items`)."""
        if any(arg.star for arg in checkpoint.args):
            return None
        items = [arg.value for arg in checkpoint.args]
        bound = self.ctx.parents.get(checkpoint)
        # Bound where it is built, or where a factory of this file returning it is called
        # (`ckpt = make_checkpoint()`).
        binders = [bound] if isinstance(bound, cst.Assign) else []
        scope = self.ctx.scope_of(checkpoint)
        if isinstance(bound, cst.Return) and isinstance(scope, cst.FunctionDef):
            binders += [self.ctx.parents.get(site) for site in self.ctx.calls.call_sites.get(scope, [])]
        names = {dotted(t.target) for b in binders if isinstance(b, cst.Assign) for t in b.targets} - {None}
        items += [a.value for a in self.ctx.nodes(cst.Assign) for t in a.targets
                  if isinstance(t.target, cst.Attribute) and dotted(t.target.value) in names]
        return items

    def holds_all(self, checkpoint: cst.Call, trained: list[cst.Call]) -> bool:
        items = self.items(checkpoint)
        return items is None or all(self.holds_optimizer(items, receiver(step), checkpoint, trained)
                                    for step in trained)

    def holds_optimizer(self, items: list[cst.BaseExpression], optimizer: cst.BaseExpression,
                         checkpoint: cst.Call, trained: list[cst.Call]) -> bool:
        """An item is the optimizer (by its name, or what the name was built from: a `LossScaleOptimizer(opt)`
        wrapper), is the model it was compiled with, or the object (`self`) that holds it."""
        label = dotted(optimizer) or ""
        if label.startswith("self.") and self._held_by_trackable_class(optimizer, checkpoint):
            return True
        aliases = self._spellings(optimizer)
        optimizer_items = [item for item in items if names_an_optimizer(dotted(item))]
        if len(optimizer_items) >= len(trained):
            return True  # as many optimizers saved as trained: spelt differently (`self._opt` vs `opt`)
        for item in items:
            item_label = dotted(item) or ""
            if aliases & self._spellings(item) or item_label == "self" and label.startswith("self."):
                return True
            if label == f"{item_label}.optimizer" or self._compiled_with(item, aliases):
                return True
        return False

    def _spellings(self, expr: cst.BaseExpression) -> set[str]:
        """The last names `expr` goes by: its own, and those of its value's call arguments."""
        value = self.ctx.flow.resolve_value(expr)
        found = {last_name(expr), last_name(value)}
        if isinstance(value, cst.Call):
            found |= {last_name(arg) for arg in positional_args(value)}
        return found - {""}

    def _compiled_with(self, model: cst.BaseExpression, aliases: set[str]) -> bool:
        """`model.compile(optimizer=opt)` or `model.optimizer = opt` somewhere in the file."""
        model_name = last_name(model)
        for call in self.ctx.nodes(cst.Call):
            if call_name(call) == "compile" and last_name(receiver(call)) == model_name:
                given = argument(call, 0, "optimizer")
                if given is not None and aliases & self._spellings(given):
                    return True
        return any(isinstance(t.target, cst.Attribute) and t.target.attr.value == "optimizer"
                   and last_name(t.target.value) == model_name and aliases & self._spellings(a.value)
                   for a in self.ctx.nodes(cst.Assign) for t in a.targets)

    def _held_by_trackable_class(self, optimizer: cst.BaseExpression, checkpoint: cst.Call) -> bool:
        """`self.opt` in a class with a base (a Keras model, a `tf.Module`, a trainer): the object tracks it,
        so a checkpoint outside that class saving its instance saves the optimizer too."""
        step_class = next((a for a in self.ctx.ancestors(optimizer) if isinstance(a, cst.ClassDef)), None)
        checkpoint_class = next((a for a in self.ctx.ancestors(checkpoint) if isinstance(a, cst.ClassDef)), None)
        return step_class is not None and bool(step_class.bases) and step_class is not checkpoint_class
