"""Same-file definitions, read from the tree alone: functions and classes by name, methods, and the calls a
body makes or a call passes (no value is resolved here: the data flow asks these questions)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Iterator

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.nodes import call_name, positional_args

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext, SourceOrdered
    from lintloop.analysis.index import Binding

# The nodes whose calls `calls_in` gives.
_CONTAINERS = (cst.For, cst.While, cst.FunctionDef, cst.With)


class Definitions(Analysis):
    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
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

    def subclasses(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
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
