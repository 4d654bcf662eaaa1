"""`tf.distribute` strategies: which objects are strategies, their scopes, and the per-replica step functions."""

from __future__ import annotations

from collections import defaultdict

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.with_blocks import WithBlocks
from lintloop.analysis.nodes import argument, call_name, receiver

_STRATEGY_USERS = ("run", "experimental_distribute_dataset", "distribute_datasets_from_function")


class Strategies(Analysis):
    asks = frozenset({"calls", "definitions", "flow"})

    def is_strategy(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        made = self.ctx.flow.constructed_by(expr, at)
        if made is None:
            return False
        # Not `tf.distribute.get_strategy()`: outside a scope it is the default (no-op) strategy,
        # and inside one everything built in that dynamic extent is in scope anyway.
        return made[1].startswith("tensorflow.distribute.") and made[1].endswith("Strategy")

    @computed
    def scopes(self) -> WithBlocks:
        """`with strategy.scope():` blocks."""
        return WithBlocks(self.ctx, "strategy_scope", lambda call: call_name(call) == "scope"
                          and receiver(call) is not None and self.is_strategy(receiver(call), call))

    @computed
    def runs(self) -> list[cst.Call]:
        """`strategy.run(fn, ...)` calls on a strategy built in this file."""
        return [call for call in self.ctx.nodes(cst.Call)
                if call_name(call) == "run" and receiver(call) is not None
                and self.is_strategy(receiver(call), call)]

    @computed
    def used(self) -> bool:
        """A strategy built in this file runs a step or distributes a dataset."""
        return any(call_name(c) in _STRATEGY_USERS and receiver(c) is not None and self.is_strategy(receiver(c), c)
                   for c in self.ctx.nodes(cst.Call))

    @computed
    def step_functions(self) -> set[cst.FunctionDef]:
        """Functions passed to `strategy.run` and the same-file functions they call."""
        steps: set[cst.FunctionDef] = set()
        for call in self.runs:
            fn_expr = argument(call, 0, "fn")
            for fn in self.ctx.calls.local_functions(fn_expr) if fn_expr is not None else []:
                if fn not in steps:  # else it is there with all it calls (the step of another run, or called by one)
                    steps.add(fn)
                    steps.update(self.ctx.calls.called_functions(fn))
        return steps

    @computed
    def _scoped_functions(self) -> set[cst.FunctionDef]:
        """Functions every same-file call of which happens inside a strategy scope."""
        scoped: set[cst.FunctionDef] = set()
        # A constructor runs where its class is called: `Trainer(...)` inside the scope builds in it.
        constructions: dict[cst.FunctionDef, list[cst.Call]] = defaultdict(list)
        for call in self.ctx.nodes(cst.Call):
            cls = self.ctx.definitions.local_class(call.func)
            init = next(iter(self.ctx.definitions.methods_named(cls, "__init__")), None) if cls is not None else None
            if init is not None:
                constructions[init].append(call)
        sites_of = {**self.ctx.calls.call_sites,
                    **{init: [*self.ctx.calls.call_sites.get(init, []), *calls] for init, calls in constructions.items()}}
        changed = True
        while changed:
            changed = False
            for fn, sites in sites_of.items():
                if fn not in scoped and sites and all(self._lexically_scoped(s, scoped) for s in sites):
                    scoped.add(fn)
                    changed = True
        return scoped

    def _lexically_scoped(self, node: cst.CSTNode, scoped_functions: set[cst.FunctionDef]) -> bool:
        if self.scopes.enclosing(node):
            return True
        return any(a in scoped_functions for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef))

    def in_scope(self, node: cst.CSTNode) -> bool:
        """Inside `with strategy.scope():`, lexically or in a function only called from inside one."""
        return self._lexically_scoped(node, self._scoped_functions)
