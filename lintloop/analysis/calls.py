"""Same-file calls resolved through values: which defs a call runs (`step = train_step; step(x)`), each
function's call sites, and questions carried out through callers."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Callable

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.nodes import argument, call_name, positional_args

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext

# Calls that return (a compiled version of) the function passed first: `tf.function(f)`.
FUNCTION_WRAPPERS = {"tensorflow.function"}

# How far `through_callers` follows callers of callers: deep enough for helper-of-helper code,
# shallow enough that a question never walks a whole file's call graph.
CALLER_DEPTH = 4
# How far a function is taken to run once per iteration of a loop in its callers (a step function the
# loop calls, and a helper the step calls): the screen gives those units the `loop` token as deep.
REPEAT_DEPTH = 2

# The call sites that carry a question from a helper out to where it holds, innermost first.
CallChain = tuple[cst.Call, ...]


class CallGraph(Analysis):
    asks = frozenset({"definitions", "flow"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._local: dict[cst.CSTNode, list[cst.FunctionDef]] = {}  # `local_functions`, per expression

    def local_functions(self, expr: cst.BaseExpression) -> list[cst.FunctionDef]:
        """Functions defined in this file that `expr` (`f`, `self.f`, `tf.function(f)`) refers to."""
        found = self._local.get(expr)
        if found is None:
            found = self._local[expr] = self._local_functions(expr)
        return found

    def _local_functions(self, expr: cst.BaseExpression) -> list[cst.FunctionDef]:
        if isinstance(expr, cst.Call) and self.ctx.names.callee(expr) in FUNCTION_WRAPPERS:
            inner = argument(expr, 0, "func")
            return self.local_functions(inner) if inner is not None else []
        if isinstance(expr, cst.Attribute) and expr.attr.value in self.ctx.definitions.functions:
            return self._methods_named(expr)
        if isinstance(expr, cst.Name):
            defined = self.ctx.definitions.functions.get(expr.value, [])
            if defined:
                return defined
            value = self.ctx.flow.resolve_value(expr)
            if value is not expr:
                return self.local_functions(value)
        return []

    def _methods_named(self, expr: cst.Attribute) -> list[cst.FunctionDef]:
        """The methods `obj.m` may run: for `self.m`, the class's own `m` and its same-file subclasses'
        overrides (every function named `m` where the class has none: a mixin's, a subclass's hook);
        for an instance of a class of this file (`Trainer().fit`, `trainer = Trainer(); trainer.fit`),
        that class's `m`."""
        name = expr.attr.value
        owner = expr.value
        definitions = self.ctx.definitions
        if isinstance(owner, cst.Name) and owner.value == "self":
            method = next((a for a in self.ctx.ancestors(expr)
                           if isinstance(a, cst.FunctionDef) and definitions.method_class(a) is not None), None)
            cls = definitions.method_class(method) if method is not None else None
            if cls is None:
                return definitions.functions[name]
            own = [m for c in (cls, *definitions.subclasses(cls)) for m in definitions.methods_named(c, name)]
            return list(dict.fromkeys(own)) or definitions.functions[name]
        instance = owner if isinstance(owner, cst.Call) else self.ctx.flow.resolve_value(owner)
        cls = definitions.local_class(instance.func) if isinstance(instance, cst.Call) else None
        return list(definitions.methods_named(cls, name)) if cls is not None else []

    def targets(self, call: cst.Call) -> list[cst.FunctionDef]:
        """Same-file functions a call runs: the callee, and `fn` in `strategy.run(fn, ...)`."""
        targets = self.local_functions(call.func)
        if call_name(call) == "run" and positional_args(call):
            targets = targets + self.local_functions(positional_args(call)[0])
        return targets

    def called_functions(self, node: cst.CSTNode) -> set[cst.FunctionDef]:
        """Same-file functions called (transitively) from `node`'s body."""
        found: set[cst.FunctionDef] = set()
        work = [node]
        while work:
            current = work.pop()
            for call in self.ctx.definitions.calls_in(current):
                for fn in self.targets(call):
                    if fn not in found:
                        found.add(fn)
                        work.append(fn)
        return found

    @computed
    def call_sites(self) -> dict[cst.FunctionDef, list[cst.Call]]:
        """For each same-file function, the calls that name it directly.

        A call names every function of its name (a notebook redefines `train` in many cells): the
        functions of one name share one list of calls, built once, not one copy each."""
        sites: dict[cst.FunctionDef, list[cst.Call]] = defaultdict(list)
        for call in self.ctx.nodes(cst.Call):
            named = self.local_functions(call.func)
            if named:
                shared = sites.get(named[0])
                if shared is None:
                    shared = []
                    for fn in named:
                        sites[fn] = shared
                shared.append(call)
        return sites

    def through_callers(self, node: cst.CSTNode, holds: Callable[[cst.CSTNode], bool],
                        every: bool = True, depth: int = CALLER_DEPTH) -> CallChain | None:
        """Does `holds` hold at `node` itself, or at the call sites of the same-file function that
        contains it (transitively: callers of callers, `depth` deep, cycles cut)?

        `every`: at every call site (a helper "called only from" a tf.function, only inside a
        strategy scope); else at one. Returns `()` when `holds(node)`, the call sites through which
        it holds (innermost first, the shortest such chain), or None — also for a function with
        no call site in the file, whose callers cannot be seen."""
        return self._through_callers(node, holds, every, depth, frozenset())

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
