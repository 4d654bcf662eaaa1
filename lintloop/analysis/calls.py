"""Same-file functions and calls: which defs a call runs, which calls a body makes."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterator

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.syntax import argument, call_name, positional_args

# Calls that return (a compiled version of) the function passed first: `tf.function(f)`.
FUNCTION_WRAPPERS = {"tensorflow.function"}

# How far `through_callers` follows callers of callers: deep enough for helper-of-helper code,
# shallow enough that a question never walks a whole file's call graph.
CALLER_DEPTH = 4

# The call sites that carry a question from a helper out to where it holds, innermost first.
CallChain = tuple[cst.Call, ...]


class CallGraph(Analysis):
    @computed
    def functions(self) -> dict[str, list[cst.FunctionDef]]:
        table: dict[str, list[cst.FunctionDef]] = defaultdict(list)
        for fn in self.ctx.nodes(cst.FunctionDef):
            table[fn.name.value].append(fn)
        return table

    def local_class(self, expr: cst.BaseExpression) -> cst.ClassDef | None:
        """The class defined in this file that a plain name refers to."""
        if isinstance(expr, cst.Name):
            return next((c for c in self.ctx.nodes(cst.ClassDef) if c.name.value == expr.value), None)
        return None

    def local_functions(self, expr: cst.BaseExpression) -> list[cst.FunctionDef]:
        """Functions defined in this file that `expr` (`f`, `self.f`, `tf.function(f)`) refers to."""
        if isinstance(expr, cst.Call) and self.ctx.names.callee(expr) in FUNCTION_WRAPPERS:
            inner = argument(expr, 0, "func")
            return self.local_functions(inner) if inner is not None else []
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            return self.functions.get(expr.attr.value, [])
        if isinstance(expr, cst.Name):
            defined = self.functions.get(expr.value, [])
            if defined:
                return defined
            value = self.ctx.flow.resolve_value(expr)
            if value is not expr:
                return self.local_functions(value)
        return []

    def targets(self, call: cst.Call) -> list[cst.FunctionDef]:
        """Same-file functions a call runs: the callee, and `fn` in `strategy.run(fn, ...)`."""
        targets = self.local_functions(call.func)
        if call_name(call) == "run" and positional_args(call):
            targets = targets + self.local_functions(positional_args(call)[0])
        return targets

    def calls_in(self, node: cst.CSTNode, into_nested_defs: bool = False) -> Iterator[cst.Call]:
        """Calls inside a loop, function or with-block (not those in nested defs and lambdas, unless asked)."""
        for call in self._calls_by_container.get(node, ()):
            if into_nested_defs or not any(
                isinstance(a, (cst.FunctionDef, cst.Lambda)) and a is not node
                for a in self._ancestors_until(call, node)
            ):
                yield call

    def _ancestors_until(self, node: cst.CSTNode, stop: cst.CSTNode) -> Iterator[cst.CSTNode]:
        for ancestor in self.ctx.ancestors(node):
            if ancestor is stop:
                return
            yield ancestor

    @computed
    def _calls_by_container(self) -> dict[cst.CSTNode, list[cst.Call]]:
        """For each loop, function and with-block: the calls inside it."""
        containers = (cst.For, cst.While, cst.FunctionDef, cst.With)
        table: dict[cst.CSTNode, list[cst.Call]] = defaultdict(list)
        for call in self.ctx.nodes(cst.Call):
            for ancestor in self.ctx.ancestors(call):
                if isinstance(ancestor, containers):
                    table[ancestor].append(call)
        return table

    def called_functions(self, node: cst.CSTNode) -> set[cst.FunctionDef]:
        """Same-file functions called (transitively) from `node`'s body."""
        found: set[cst.FunctionDef] = set()
        work = [node]
        while work:
            current = work.pop()
            for call in self.calls_in(current):
                for fn in self.targets(call):
                    if fn not in found:
                        found.add(fn)
                        work.append(fn)
        return found

    @computed
    def call_sites(self) -> dict[cst.FunctionDef, list[cst.Call]]:
        """For each same-file function, the calls that name it directly."""
        sites: dict[cst.FunctionDef, list[cst.Call]] = defaultdict(list)
        for call in self.ctx.nodes(cst.Call):
            for fn in self.local_functions(call.func):
                sites[fn].append(call)
        return sites

    def through_callers(self, node: cst.CSTNode, holds: Callable[[cst.CSTNode], bool],
                        every: bool = True) -> CallChain | None:
        """Does `holds` hold at `node` itself, or at the call sites of the same-file function that
        contains it (transitively: callers of callers, `CALLER_DEPTH` deep, cycles cut)?

        `every`: at every call site (a helper "called only from" a tf.function, only inside a
        strategy scope); else at one. Returns `()` when `holds(node)`, the call sites through which
        it holds (innermost first, the shortest such chain), or None — also for a function with
        no call site in the file, whose callers cannot be seen."""
        return self._through_callers(node, holds, every, CALLER_DEPTH, frozenset())

    def _through_callers(self, node: cst.CSTNode, holds: Callable[[cst.CSTNode], bool], every: bool,
                         depth: int, seen: frozenset[cst.FunctionDef]) -> CallChain | None:
        if holds(node):
            return ()
        function = next((a for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
        sites = self.call_sites.get(function, []) if function is not None else []
        if depth == 0 or function in seen or not sites:
            return None
        chains = []
        for site in sites:
            chain = self._through_callers(site, holds, every, depth - 1, seen | {function})
            if chain is None and every:
                return None
            if chain is not None:
                chains.append((site, *chain))
        return min(chains, key=len) if chains else None

    def describe_chain(self, chain: CallChain, outermost: str) -> str:
        """", called from `log_metrics` at line 7, called from the tf.function `train_step` at line 12"
        for a chain of call sites (innermost first); `outermost` names where the last call is."""
        parts = []
        for i, site in enumerate(chain):
            caller = next((a for a in self.ctx.ancestors(site) if isinstance(a, cst.FunctionDef)), None)
            label = outermost if i == len(chain) - 1 else f"`{caller.name.value}`" if caller else "module code"
            parts.append(f", called from {label} at line {self.ctx.line_of(site)}")
        return "".join(parts)
