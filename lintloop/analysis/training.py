"""Training: what is differentiated (tape targets, `backward()`ed tensors), what steps an optimizer, training
functions and loops, and which of them run a node (through how many same-file calls: `CALL_DEPTH`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.index import Scope
from lintloop.analysis.nodes import argument, call_name, dotted, positional_args, receiver, steps_an_optimizer

if TYPE_CHECKING:
    from lintloop.analysis.calls import CallChain
    from lintloop.analysis.context import FileContext, SourceOrdered
    from lintloop.analysis.dataflow import ValueUses

_GRADIENT_FUNCTIONS = ("jax.grad", "jax.value_and_grad", "torch.autograd.grad")
# What the screen must find in a file for a rule that asks whether code trains: a call of each name
# `_is_training_call` accepts (tests/test_analysis.py keeps them equal).
TRAINING_CALL_TOKENS = tuple(f"call:{name}" for name in (
    "backward", "apply_gradients", "minimize", "gradient", "step", *(q.rsplit(".", 1)[1] for q in _GRADIENT_FUNCTIONS)))
# TensorFlow's optimizer steps: calls whose receiver is an optimizer the file trains with.
_TF_OPTIMIZER_STEPS = ("apply_gradients", "minimize")
# How many same-file calls a node may sit below what trains it: the training loop that runs it, the
# call that differentiates what it computes, the loop or function that steps an optimizer.
CALL_DEPTH = 3


@dataclass(frozen=True)
class StepSite:
    """A training loop that runs a node once per iteration, and the same-file calls that lead there."""

    loop: cst.For | cst.While
    path: tuple[cst.Call, ...] = ()  # calls from the loop's body down to the node's function, outermost first


class Training(Analysis):
    asks = frozenset({"calls", "definitions", "flow", "tf"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._uses_by_scope: dict[Scope, ValueUses] = {}
        self._returned_by_function: dict[cst.FunctionDef, ValueUses] = {}
        self._steps_through_calls: dict[tuple[int, int], list[StepSite]] = {}

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

    @computed
    def _differentiated_by_scope(self) -> dict[Scope, list[tuple[cst.BaseExpression, cst.Call]]]:
        table: dict[Scope, list[tuple[cst.BaseExpression, cst.Call]]] = defaultdict(list)
        for target, call in self.differentiated:
            table[self.ctx.scope_of(call)].append((target, call))
        return table

    def differentiated_in_scope(self, scope: Scope) -> list[tuple[cst.BaseExpression, cst.Call]]:
        """Those of `differentiated` whose call's scope is `scope`, in the same order."""
        return self._differentiated_by_scope.get(scope, [])

    @computed
    def _differentiating_calls(self) -> tuple[SourceOrdered, dict[cst.Call, list[int]]]:
        """The calls of `differentiated`, each once, in source order; and where each is in that list."""
        places: dict[cst.Call, list[int]] = defaultdict(list)
        for place, (_, call) in enumerate(self.differentiated):
            places[call].append(place)
        return self.ctx.in_order(sorted(places, key=self.ctx.order.__getitem__)), places

    def differentiated_within(self, region: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.Call]]:
        """Those of `differentiated` whose call is inside `region`, in the same order."""
        calls, places = self._differentiating_calls
        return [self.differentiated[p] for p in sorted(p for call in calls.within(region) for p in places[call])]

    def _uses(self, scope: Scope) -> ValueUses:
        """The differentiated values of `scope`, as uses of what flows into them."""
        uses = self._uses_by_scope.get(scope)
        if uses is None:
            uses = self._uses_by_scope[scope] = self.ctx.flow.uses(self.differentiated_in_scope(scope))
        return uses

    def _returned(self, function: cst.FunctionDef) -> ValueUses:
        """The values `function` returns, as uses of what flows into them."""
        uses = self._returned_by_function.get(function)
        if uses is None:
            uses = self._returned_by_function[function] = self.ctx.flow.uses(
                [(r.value, r) for r in self.ctx.returns_of(function) if r.value is not None])
        return uses

    def is_differentiated(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Does the value computed at `node` reach something that is differentiated — in the same
        function, or returned by its function to a caller in this file that differentiates it?"""
        ctx = self.ctx
        scope = ctx.scope_of(node)
        if ctx.flow.reaches(node, self._uses(scope)):
            return True
        if depth >= CALL_DEPTH or not isinstance(scope, cst.FunctionDef):
            return False
        returned = ctx.flow.reaches(node, self._returned(scope))
        return returned and any(self.is_differentiated(call, depth + 1) for call in ctx.calls.call_sites.get(scope, ()))

    def reaches(self, value: cst.CSTNode, target: cst.BaseExpression, call: cst.Call, depth: int = 0) -> bool:
        """Does the value computed at `value` flow into `target`, which `call` differentiates — in the same
        function, or returned by its function to a caller (`CALL_DEPTH` calls at most)?"""
        ctx = self.ctx
        scope = ctx.scope_of(value)
        if ctx.scope_of(call) is scope:
            return ctx.flow.flows_into(value, target, call)
        if depth >= CALL_DEPTH or not isinstance(scope, cst.FunctionDef):
            return False
        returned = any(r.value is not None and ctx.flow.flows_into(value, r.value, r) for r in ctx.returns_of(scope))
        return returned and any(self.reaches(site, target, call, depth + 1)
                                for site in ctx.calls.call_sites.get(scope, ()))

    def steps_optimizer(self, node: cst.CSTNode) -> bool:
        """Does `node` (a loop or function) step an optimizer — directly, through a GradScaler, or in a
        same-file function it calls?"""
        bodies = [node, *self.ctx.calls.called_functions(node)]
        return any(call_name(call) == "step" and steps_an_optimizer(receiver(call))
                   for body in bodies for call in self.ctx.definitions.calls_in(body))

    def optimizer_chains(self, node: cst.CSTNode, functions: bool = False, depth: int = 0) -> Iterator[CallChain]:
        """The ways `node` runs in code that steps an optimizer (`steps_optimizer`): `()` where a loop around
        it does (or, with `functions`, the function around it), else the call sites leading there through
        the same-file functions around it, innermost first (`CALL_DEPTH` calls at most); lazily."""
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, (cst.For, cst.While)) and self.steps_optimizer(ancestor):
                yield ()
                return
            if isinstance(ancestor, cst.FunctionDef):
                if functions and self.steps_optimizer(ancestor):
                    yield ()
                elif depth < CALL_DEPTH:
                    for site in self.ctx.calls.call_sites.get(ancestor, ()):
                        yield from ((site, *chain) for chain in self.optimizer_chains(site, functions, depth + 1))
                return

    @computed
    def optimizer_updates(self) -> list[cst.Call]:
        """TensorFlow's optimizer steps: one `opt.apply_gradients(...)` / `opt.minimize(...)` per optimizer
        (by its spelling), whose receiver is a name or attribute the file holds (not an imported module's
        `minimize`, like `scipy.optimize`)."""
        steps: dict[str, cst.Call] = {}
        for call in self.ctx.nodes(cst.Call):
            owner = receiver(call)
            label = dotted(owner) if owner is not None else None
            if call_name(call) in _TF_OPTIMIZER_STEPS and label and self.ctx.names.qualname(owner) is None:
                steps.setdefault(label, call)
        return list(steps.values())

    def runs_optimizer_steps(self, node: cst.CSTNode, functions: bool = False) -> bool:
        """Does `node` run in code that steps an optimizer: has it one of `optimizer_chains`?"""
        return next(self.optimizer_chains(node, functions), None) is not None

    def _is_training_call(self, call: cst.Call) -> bool:
        name = call_name(call)
        if name in ("backward", "apply_gradients", "minimize"):
            return True
        if name == "gradient" and self.ctx.tf.tape_of_gradient(call) is not None:
            return True
        if name == "step":
            return steps_an_optimizer(receiver(call))
        return self.ctx.names.callee(call) in _GRADIENT_FUNCTIONS

    @computed
    def functions(self) -> set[cst.FunctionDef]:
        """Functions that compute gradients or step an optimizer, directly or through same-file calls."""
        calls, calls_in = self.ctx.calls, self.ctx.definitions.calls_in
        result = {fn for fn in self.ctx.nodes(cst.FunctionDef)
                  if any(self._is_training_call(c) for c in calls_in(fn))}
        changed = True
        while changed:
            changed = False
            for fn in self.ctx.nodes(cst.FunctionDef):
                if fn not in result and any(t in result for c in calls_in(fn) for t in calls.targets(c)):
                    result.add(fn)
                    changed = True
        return result

    def is_training_loop(self, loop: cst.For | cst.While) -> bool:
        calls = self.ctx.calls
        return any(self._is_training_call(call) or any(t in self.functions for t in calls.targets(call))
                   for call in self.ctx.definitions.calls_in(loop))

    def loops_running(self, node: cst.CSTNode, depth: int = 0) -> list[StepSite]:
        """The training loops that run `node` on each of their iterations: the innermost loop around it
        when that loop trains, else — for a node of a function outside any loop — the training loops
        that call that function (through `CALL_DEPTH` same-file calls at most). A node in a loop that does not
        train (validation inside the epoch loop) has none."""
        ctx = self.ctx
        loop = ctx.innermost_loop(node)
        if loop is not None:
            return [StepSite(loop)] if self.is_training_loop(loop) else []
        scope = ctx.scope_of(node)
        if depth >= CALL_DEPTH or not isinstance(scope, cst.FunctionDef):
            return []
        sites = ctx.calls.call_sites.get(scope, ())
        # The same for every node of the function, and for every function of its name (they share
        # their call sites): found once.
        key = (id(sites), depth)
        found = self._steps_through_calls.get(key)
        if found is None:
            found = self._steps_through_calls[key] = [
                StepSite(s.loop, s.path + (site,)) for site in sites for s in self.loops_running(site, depth + 1)]
        return found
