"""Bindings and data flow: which assignments a name sees, and whether a value reaches another."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from lintloop.analysis.base import Analysis
from lintloop.analysis.index import Binding
from lintloop.analysis.syntax import dotted, names_in

# How many same-file calls a node may sit below the training loop that runs it.
_MAX_CALL_DEPTH = 3


@dataclass(frozen=True)
class StepSite:
    """A training loop that runs a node once per iteration, and the same-file calls that lead there."""

    loop: cst.For | cst.While
    path: tuple[cst.Call, ...] = ()  # calls from the loop's body down to the node's function, outermost first


class DataFlow(Analysis):
    def bindings_of(self, name: str, at: cst.CSTNode, before: bool = True) -> list[Binding]:
        """Bindings of `name` visible from `at`: innermost scope that binds it; earlier ones if `before`."""
        ctx = self.ctx
        scopes = ctx.enclosing_scopes(at)
        for scope in scopes:
            found = ctx.bindings_in(scope, name)
            if found:
                if scope is not scopes[0] or not before:
                    return list(found)
                # `y = f(y)`: while evaluating the right side, the new `y` is not bound yet.
                return [b for b in found if b.order < ctx.order[at]
                        and not (b.value is not None and ctx.is_inside(at, b.value))]
        return []

    def last_binding(self, name: str, at: cst.CSTNode) -> Binding | None:
        found = self.bindings_of(name, at)
        return max(found, key=lambda b: b.order) if found else None

    def feeding_bindings(self, expr: cst.CSTNode, at: cst.CSTNode | None = None) -> list[Binding]:
        """Every binding whose value can reach `expr` through assignments before `at` (default: expr)."""
        at = at if at is not None else expr
        seen: set[str] = set()
        result: list[Binding] = []
        work = list(names_in(expr))
        while work:
            name = work.pop()
            if name in seen:
                continue
            seen.add(name)
            for binding in self.bindings_of(name, at):
                result.append(binding)
                if binding.value is not None:
                    work.extend(names_in(binding.value))
                if binding.augmented:
                    work.append(name)
        return result

    def flows_into(self, node: cst.CSTNode, target: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        """Does the value computed at `node` reach `target` (directly or through earlier assignments)?"""
        if self.ctx.is_inside(node, target):
            return True
        return any(b.value is not None and self.ctx.is_inside(node, b.value)
                   for b in self.feeding_bindings(target, at))

    def resolve_value(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> cst.BaseExpression:
        """Follow a plain name to the value of its last assignment before `at` (one hop at a time)."""
        at = at if at is not None else expr
        for _ in range(8):
            if isinstance(expr, cst.Attribute) and (dotted(expr) or "").startswith("self."):
                return self._attribute_value(dotted(expr)) or expr
            if not isinstance(expr, cst.Name):
                return expr
            binding = self.last_binding(expr.value, at)
            if binding is None or binding.value is None or binding.augmented:
                return expr
            at, expr = binding.node, binding.value
        return expr

    def _attribute_value(self, name: str) -> cst.BaseExpression | None:
        """The value assigned to `self.x` in this file, when every assignment agrees on what it calls."""
        values = [b.value for bindings in self.ctx.bindings.values() for b in bindings.get(name, ())
                  if b.value is not None]
        callees = {self.ctx.names.callee(v) if isinstance(v, cst.Call) else None for v in values}
        return values[0] if len(callees) == 1 and None not in callees else None

    def constructed_by(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> tuple[cst.Call, str] | None:
        """(call, qualified callee) when `expr` is, or names, the result of calling an imported thing."""
        value = self.resolve_value(expr, at)
        if isinstance(value, cst.Call):
            name = self.ctx.names.callee(value)
            if name:
                return value, name
        return None

    def source_value(self, binding: Binding) -> cst.BaseExpression | None:
        """What a binding takes its value from: the assigned value; for a name unpacked from a tuple
        (`out, hidden = model(x, hidden)`) the whole right side; for a `for` target, the iterable."""
        if binding.value is not None:
            return binding.value
        node = binding.node
        if isinstance(node, cst.Assign):
            return node.value
        if isinstance(node, cst.For):
            return node.iter
        return None

    def training_steps(self, node: cst.CSTNode, depth: int = 0) -> list[StepSite]:
        """The training loops that run `node` on each of their iterations: the innermost loop around it
        when that loop trains, else — for a node of a function outside any loop — the training loops
        that call that function (through up to three same-file calls). A node in a loop that does not
        train (validation inside the epoch loop) has none."""
        ctx = self.ctx
        loop = ctx.innermost_loop(node)
        if loop is not None:
            return [StepSite(loop)] if ctx.training.is_training_loop(loop) else []
        scope = ctx.scope_of(node)
        if depth >= _MAX_CALL_DEPTH or not isinstance(scope, cst.FunctionDef):
            return []
        found: list[StepSite] = []
        for site in ctx.calls.call_sites.get(scope, ()):
            found.extend(StepSite(s.loop, s.path + (site,)) for s in self.training_steps(site, depth + 1))
        return found
