"""Same-file functions and calls: which defs a call runs, which calls a body makes."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Callable, Iterator

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.syntax import argument, call_name, positional_args

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext, SourceOrdered
    from lintloop.analysis.index import Binding

# Calls that return (a compiled version of) the function passed first: `tf.function(f)`.
FUNCTION_WRAPPERS = {"tensorflow.function"}

# How far `through_callers` follows callers of callers: deep enough for helper-of-helper code,
# shallow enough that a question never walks a whole file's call graph.
CALLER_DEPTH = 4
# How far a function is taken to run once per iteration of a loop in its callers (a step function the
# loop calls, and a helper the step calls): the screen gives those units the `loop` token as deep.
REPEAT_DEPTH = 2

# The nodes whose calls `calls_in` gives.
_CONTAINERS = (cst.For, cst.While, cst.FunctionDef, cst.With)

# The call sites that carry a question from a helper out to where it holds, innermost first.
CallChain = tuple[cst.Call, ...]


class CallGraph(Analysis):
    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._local: dict[cst.CSTNode, list[cst.FunctionDef]] = {}  # `local_functions`, per expression
        # Per class (each asked once: a class of thousands of methods is asked about as often).
        self._methods: dict[cst.ClassDef, tuple[cst.FunctionDef, ...]] = {}
        self._methods_by_name: dict[cst.ClassDef, dict[str, list[cst.FunctionDef]]] = {}
        self._instance_bindings: dict[cst.ClassDef, dict[str, list[Binding]]] = {}

    @computed
    def functions(self) -> dict[str, list[cst.FunctionDef]]:
        table: dict[str, list[cst.FunctionDef]] = defaultdict(list)
        for fn in self.ctx.nodes(cst.FunctionDef):
            table[fn.name.value].append(fn)
        return table

    @computed
    def _by_name(self) -> dict[str, SourceOrdered]:
        grouped: dict[str, list[cst.Call]] = defaultdict(list)
        for call in self.ctx.nodes(cst.Call):
            grouped[call_name(call)].append(call)
        return {name: self.ctx.in_order(calls) for name, calls in grouped.items()}

    def named(self, name: str) -> SourceOrdered:
        """The calls whose last name (`call_name`) is `name`, in source order."""
        return self._by_name.get(name) or self.ctx.in_order([])

    def local_class(self, expr: cst.BaseExpression) -> cst.ClassDef | None:
        """The class defined in this file that a plain name refers to."""
        return self._classes.get(expr.value) if isinstance(expr, cst.Name) else None

    @computed
    def _classes(self) -> dict[str, cst.ClassDef]:
        """Each class name, with the first class of that name."""
        found: dict[str, cst.ClassDef] = {}
        for cls in self.ctx.nodes(cst.ClassDef):
            found.setdefault(cls.name.value, cls)
        return found

    def methods(self, cls: cst.ClassDef) -> tuple[cst.FunctionDef, ...]:
        """`cls`'s methods, and those of its same-file base classes."""
        found = self._methods.get(cls)
        if found is None:
            own = [s for s in cls.body.body if isinstance(s, cst.FunctionDef)]
            for base in cls.bases:
                parent = self.local_class(base.value)
                if parent is not None and parent is not cls:
                    own += self.methods(parent)
            found = self._methods[cls] = tuple(own)
        return found

    def methods_named(self, cls: cst.ClassDef, name: str) -> list[cst.FunctionDef]:
        """`cls`'s methods (`methods`) named `name`, in their order."""
        by_name = self._methods_by_name.get(cls)
        if by_name is None:
            by_name = self._methods_by_name[cls] = defaultdict(list)
            for method in self.methods(cls):
                by_name[method.name.value].append(method)
        return by_name.get(name, [])

    def instance_bindings(self, cls: cst.ClassDef, name: str) -> list[Binding]:
        """The bindings of `name` (`self.x`) in `cls`'s methods (`methods`), method by method."""
        by_name = self._instance_bindings.get(cls)
        if by_name is None:
            by_name = self._instance_bindings[cls] = defaultdict(list)
            for method in self.methods(cls):
                for bound, bindings in self.ctx.bindings.get(method, {}).items():
                    if bound.startswith("self."):
                        by_name[bound] += bindings
        return by_name.get(name, [])

    def method_class(self, function: cst.FunctionDef) -> cst.ClassDef | None:
        """The class `function` is a method of: its def stands in the class's own body."""
        block = self.ctx.parents.get(function)
        cls = self.ctx.parents.get(block) if isinstance(block, cst.IndentedBlock) else None
        return cls if isinstance(cls, cst.ClassDef) else None

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
        if isinstance(expr, cst.Attribute) and expr.attr.value in self.functions:
            return self._methods_named(expr)
        if isinstance(expr, cst.Name):
            defined = self.functions.get(expr.value, [])
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
        if isinstance(owner, cst.Name) and owner.value == "self":
            method = next((a for a in self.ctx.ancestors(expr)
                           if isinstance(a, cst.FunctionDef) and self.method_class(a) is not None), None)
            cls = self.method_class(method) if method is not None else None
            if cls is None:
                return self.functions[name]
            own = [m for c in (cls, *self._subclasses(cls)) for m in self.methods_named(c, name)]
            return list(dict.fromkeys(own)) or self.functions[name]
        instance = owner if isinstance(owner, cst.Call) else self.ctx.flow.resolve_value(owner)
        cls = self.local_class(instance.func) if isinstance(instance, cst.Call) else None
        return list(self.methods_named(cls, name)) if cls is not None else []

    def _subclasses(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """The classes of this file that derive from `cls`, directly or through others of this file."""
        return [c for c in self._classes.values() if c is not cls and cls in self._bases(c)]

    def _bases(self, cls: cst.ClassDef) -> set[cst.ClassDef]:
        found: set[cst.ClassDef] = set()
        work = [cls]
        while work:
            for base in work.pop().bases:
                parent = self.local_class(base.value)
                if parent is not None and parent not in found:
                    found.add(parent)
                    work.append(parent)
        return found

    def targets(self, call: cst.Call) -> list[cst.FunctionDef]:
        """Same-file functions a call runs: the callee, and `fn` in `strategy.run(fn, ...)`."""
        targets = self.local_functions(call.func)
        if call_name(call) == "run" and positional_args(call):
            targets = targets + self.local_functions(positional_args(call)[0])
        return targets

    def calls_in(self, node: cst.CSTNode, into_nested_defs: bool = False) -> Iterator[cst.Call]:
        """Calls inside a loop, function or with-block (not those in nested defs and lambdas, unless asked);
        none for another kind of node. In source order."""
        ctx = self.ctx
        if not isinstance(node, _CONTAINERS) or node not in ctx.order:
            return
        calls = ctx.nodes_within(cst.Call, node)
        if into_nested_defs:
            yield from calls
            return
        # The outermost nested defs and lambdas: the calls inside them are left out.
        hidden: list[tuple[int, int]] = []
        for inner in ctx.nodes_within((cst.FunctionDef, cst.Lambda), node):
            if inner is not node and (not hidden or ctx.order[inner] > hidden[-1][1]):
                hidden.append((ctx.order[inner], ctx.subtree_end[inner]))
        spans = iter(hidden)
        span = next(spans, None)
        for call in calls:
            at = ctx.order[call]
            while span is not None and at > span[1]:
                span = next(spans, None)
            if span is None or at < span[0]:
                yield call

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

    def argument_for(self, site: cst.Call, fn: cst.FunctionDef, param: cst.Param) -> cst.BaseExpression | None:
        """What `site` passes `fn`'s `param` (None when not passed, or hidden in `*args` / `**kwargs`)."""
        name = param.name.value
        for arg in site.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg.value
        params = list(fn.params.posonly_params) + list(fn.params.params)
        index = next((i for i, p in enumerate(params) if p is param), None)
        if index is None:
            return None
        in_class = any(isinstance(a, cst.ClassDef) for a in self.ctx.ancestors(fn))
        bound_method = in_class and params and params[0].name.value in ("self", "cls")
        if bound_method and (isinstance(site.func, cst.Attribute) or fn.name.value == "__init__"):
            index -= 1  # `self.step(model)`, `Trainer(model)`: the first parameter is bound
        positional = positional_args(site)
        if any(a.star for a in site.args) or not 0 <= index < len(positional):
            return None
        return positional[index]

    @computed
    def direct_calls(self) -> dict[str, list[cst.Call]]:
        """The calls naming a function directly (`train(...)`, `self.train(...)`), by that name: the
        call sites a question about a parameter follows without resolving names (which asks it)."""
        found: dict[str, list[cst.Call]] = defaultdict(list)
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Name):
                found[func.value].append(call)
            elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
                found[func.attr.value].append(call)
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
