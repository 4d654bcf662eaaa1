"""Training: what is differentiated (tape targets, `backward()`ed tensors), training functions and loops."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.syntax import argument, call_name, dotted, positional_args, receiver

_GRADIENT_FUNCTIONS = ("jax.grad", "jax.value_and_grad", "torch.autograd.grad")


class Training(Analysis):
    @computed
    def differentiated(self) -> list[tuple[cst.BaseExpression, cst.Call]]:
        """(expression, call) for every value that is differentiated: tape targets and backward()ed tensors."""
        found: list[tuple[cst.BaseExpression, cst.Call]] = []
        for call, _ in self.ctx.tf.gradient_calls:
            target = argument(call, 0, "target")
            if target is not None:
                found.append((target, call))
        for call in self.ctx.nodes(cst.Call):
            if call_name(call) == "backward" and isinstance(call.func, cst.Attribute):
                found.append((call.func.value, call))
                found.extend((arg, call) for arg in positional_args(call)[:1])
            elif self.ctx.names.callee(call) in ("torch.autograd.backward", "torch.autograd.grad"):
                found.extend((arg, call) for arg in positional_args(call)[:1])
        return found

    def is_differentiated(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Does the value computed at `node` reach something that is differentiated — in the same
        function, or returned by its function to a caller in this file that differentiates it?"""
        ctx = self.ctx
        scope = ctx.scope_of(node)
        if any(ctx.scope_of(call) is scope and ctx.flow.flows_into(node, target, call)
               for target, call in self.differentiated):
            return True
        if depth >= 3 or not isinstance(scope, cst.FunctionDef):
            return False
        returned = any(r.value is not None and ctx.scope_of(r) is scope and ctx.flow.flows_into(node, r.value, r)
                       for r in ctx.nodes(cst.Return))
        return returned and any(self.is_differentiated(call, depth + 1) for call in ctx.calls.call_sites.get(scope, ()))

    def _is_training_call(self, call: cst.Call) -> bool:
        name = call_name(call)
        if name in ("backward", "apply_gradients", "minimize"):
            return True
        if name == "gradient" and any(c is call for c, _ in self.ctx.tf.gradient_calls):
            return True
        if name == "step":
            owner = receiver(call)
            label = (dotted(owner) or "").lower() if owner is not None else ""
            return "optim" in label or label.split(".")[-1] in ("opt", "optimizer") or "scaler" in label
        return self.ctx.names.callee(call) in _GRADIENT_FUNCTIONS

    @computed
    def functions(self) -> set[cst.FunctionDef]:
        """Functions that compute gradients or step an optimizer, directly or through same-file calls."""
        calls = self.ctx.calls
        result = {fn for fn in self.ctx.nodes(cst.FunctionDef)
                  if any(self._is_training_call(c) for c in calls.calls_in(fn))}
        changed = True
        while changed:
            changed = False
            for fn in self.ctx.nodes(cst.FunctionDef):
                if fn not in result and any(t in result for c in calls.calls_in(fn) for t in calls.targets(c)):
                    result.add(fn)
                    changed = True
        return result

    def is_training_loop(self, loop: cst.For | cst.While) -> bool:
        calls = self.ctx.calls
        return any(self._is_training_call(call) or any(t in self.functions for t in calls.targets(call))
                   for call in calls.calls_in(loop))
