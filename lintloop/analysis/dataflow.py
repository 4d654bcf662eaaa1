"""Bindings and data flow: which assignments a name sees, and whether a value reaches another."""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import defaultdict
from typing import TYPE_CHECKING, Iterator

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.index import Binding, Scope
from lintloop.analysis.nodes import dotted, names_in, values_read_in

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext

def _order(binding: Binding) -> int:
    return binding.order


def _made_between(found: list[Binding], after: int, before: int) -> list[Binding]:
    """Those of `found` (bindings in source order) made after point `after` and before point `before`,
    by bisection."""
    return found[bisect_right(found, after, key=_order):bisect_left(found, before, key=_order)]


# Parameters followed back through the call sites that pass them, calls deep.
_AGREEMENT_DEPTH = 3


class _FlowGraph:
    """The file's bindings as a graph of names, for following values forward (`DataFlow.reaches`)."""

    def __init__(self, ctx: FileContext) -> None:
        # The bindings each node makes, with their scope.
        self.made_at: dict[cst.CSTNode, list[tuple[Scope, Binding]]] = defaultdict(list)
        # When a use in the binding's own scope starts to see it: once its value is evaluated (an
        # assignment's value does not see the name it binds: `y = f(y)`).
        self.evaluated: dict[Binding, int] = {}
        # Per scope: name read -> name bound from it -> the earliest such binding (by `evaluated`).
        self.readers: dict[Scope, dict[str, dict[str, int]]] = {}
        for scope, table in ctx.bindings.items():
            readers: dict[str, dict[str, int]] = defaultdict(dict)
            for name, bindings in table.items():
                for binding in bindings:
                    self.made_at[binding.node].append((scope, binding))
                    if binding.value is None:
                        self.evaluated[binding] = binding.order
                        continue
                    evaluated = self.evaluated[binding] = ctx.subtree_end[binding.value]
                    for read in values_read_in(binding.value):
                        bound = readers[read]
                        if evaluated < bound.get(name, evaluated + 1):
                            bound[name] = evaluated
            self.readers[scope] = readers


class ValueUses:
    """Where values are used: `(target, at)` pairs (the target expression, evaluated at `at`), indexed
    for `DataFlow.reaches`."""

    def __init__(self, ctx: FileContext, graph: _FlowGraph,
                 pairs: list[tuple[cst.BaseExpression, cst.CSTNode]]) -> None:
        self.targets: set[cst.CSTNode] = {target for target, _ in pairs}
        # Uses evaluated inside an assignment's target or annotation (`d[loss.backward()] = x`): the
        # time of a binding is when its value is evaluated, which does not order them; and uses in a
        # method, whose instance attributes other methods bind (`_visible`). Asked one by one.
        self.irregular: list[tuple[cst.BaseExpression, cst.CSTNode]] = []
        # Per irregular use: the values of the bindings that feed it (`feeding_bindings`), found once.
        self.feeding: dict[tuple[cst.BaseExpression, cst.CSTNode], list[cst.BaseExpression]] = {}
        # Per chain of scopes (`enclosing_scopes` of the uses' points): each name a target reads, with
        # the latest point it is read at.
        self.latest: dict[tuple[Scope, ...], dict[str, int]] = defaultdict(dict)
        for target, at in pairs:
            scopes = ctx.enclosing_scopes(at)
            if _in_binding_target(ctx, graph, at) or any(ctx.definitions.method_class(s) for s in scopes[:-1]):
                self.irregular.append((target, at))
                continue
            latest = self.latest[tuple(scopes)]
            point = ctx.order[at]
            for name in names_in(target):
                if point > latest.get(name, -1):
                    latest[name] = point


def _in_binding_target(ctx: FileContext, graph: _FlowGraph, at: cst.CSTNode) -> bool:
    """Is `at` inside a binding statement, before the value it binds?"""
    return any(binding.value is not None and ctx.order[at] < ctx.order[binding.value]
               for ancestor in ctx.ancestors(at) for _, binding in graph.made_at.get(ancestor, ()))


class DataFlow(Analysis):
    asks = frozenset({"definitions"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._attribute_values: dict[str, cst.BaseExpression | None] = {}
        self._instance_bindings: dict[tuple[cst.ClassDef, str], list[Binding]] = {}

    def bindings_of(self, name: str, at: cst.CSTNode, before: bool = True) -> list[Binding]:
        """Bindings of `name` visible from `at`: innermost scope that binds it; earlier ones if `before`."""
        found, own_scope = self._visible(name, at)
        if not (before and own_scope):
            return list(found)
        return [b for b in found[:self._bound_before(found, at)] if not self._evaluates(b, at)]

    def last_binding(self, name: str, at: cst.CSTNode) -> Binding | None:
        """The last of `bindings_of(name, at)` (the first of them where several bind at one place)."""
        found, own_scope = self._visible(name, at)
        end = self._bound_before(found, at) if own_scope else len(found)
        last = None
        for index in range(end - 1, -1, -1):  # from the latest back: the bindings are in source order
            binding = found[index]
            if last is not None and binding.order != last.order:
                break
            if not (own_scope and self._evaluates(binding, at)):
                last = binding
        return last

    def bindings_latest_first(self, name: str, at: cst.CSTNode) -> Iterator[Binding]:
        """`bindings_of(name, at)` from the latest back (those made at one place in source order), lazily:
        a search that stops at the first binding that always runs reads no more of them."""
        found, own_scope = self._visible(name, at)
        end = self._bound_before(found, at) if own_scope else len(found)
        while end > 0:
            start = bisect_left(found, found[end - 1].order, 0, end, key=_order)  # those made at one place
            for binding in found[start:end]:
                if not (own_scope and self._evaluates(binding, at)):
                    yield binding
            end = start

    def bindings_within(self, name: str, at: cst.CSTNode, region: cst.CSTNode, before: bool = False) -> list[Binding]:
        """Those of `bindings_of(name, at, before)` made inside `region` (found by bisection)."""
        found, own_scope = self._visible(name, at)
        inside = self._made_within(found, region)
        if not (before and own_scope):
            return inside
        return [b for b in inside if b.order < self.ctx.order[at] and not self._evaluates(b, at)]

    def scope_bindings_within(self, scope: Scope, name: str, region: cst.CSTNode) -> list[Binding]:
        """Those of `ctx.bindings_in(scope, name)` made inside `region`."""
        return self._made_within(self.ctx.bindings_in(scope, name), region)

    def scope_bindings_between(self, scope: Scope, name: str, after: int, before: int) -> list[Binding]:
        """Those of `ctx.bindings_in(scope, name)` made between two points (`ctx.order`), both excluded."""
        return _made_between(self.ctx.bindings_in(scope, name), after, before)

    def _made_within(self, found: list[Binding], region: cst.CSTNode) -> list[Binding]:
        """Those of `found` (bindings in source order) made inside `region`."""
        return _made_between(found, self.ctx.order[region] - 1, self.ctx.subtree_end[region] + 1)

    def _visible(self, name: str, at: cst.CSTNode) -> tuple[list[Binding], bool]:
        """The bindings of `name` in the innermost scope around `at` that binds it (in source order),
        and whether that is `at`'s own scope. An instance attribute (`self.x`) that no scope around
        `at` binds before it is the one the class's other methods bind, as if theirs were an enclosing
        scope: `__init__` sets `self.model`, `fit` reads it."""
        ctx = self.ctx
        scopes = ctx.enclosing_scopes(at)
        attribute = name.startswith("self.")
        for scope in scopes:
            found = ctx.bindings_in(scope, name)
            if found and not (attribute and scope is scopes[0] and not self._bound_earlier(found, at)):
                return found, scope is scopes[0]
        if attribute:
            return self._bound_by_other_methods(name, scopes), False
        return [], False

    def _bound_earlier(self, found: list[Binding], at: cst.CSTNode) -> bool:
        """Does one of `found` (bindings of `at`'s own scope) bind before `at` is evaluated?"""
        return any(not self._evaluates(b, at) for b in found[:self._bound_before(found, at)])

    def other_method_bindings(self, name: str, function: cst.FunctionDef) -> list[Binding]:
        """The bindings of instance attribute `name` in the other methods of the class whose method holds
        `function` (none for a plain name)."""
        return self._bound_by_other_methods(name, self.ctx.enclosing_scopes(function.body)) \
            if name.startswith("self.") else []

    def _bound_by_other_methods(self, name: str, scopes: list[Scope]) -> list[Binding]:
        """The bindings of instance attribute `name` in the methods of the class whose method holds
        `scopes`, other than that method (`None` left out: a placeholder until the real value)."""
        definitions = self.ctx.definitions
        method = next((s for s in scopes if isinstance(s, cst.FunctionDef) and definitions.method_class(s)), None)
        if method is None:
            return []
        cls = definitions.method_class(method)
        key = (cls, name)
        found = self._instance_bindings.get(key)
        if found is None:
            found = self._instance_bindings[key] = sorted(
                (b for b in definitions.instance_bindings(cls, name)
                 if not (isinstance(b.value, cst.Name) and b.value.value == "None")), key=_order)
        return [b for b in found if not self.ctx.is_inside(b.node, method)]

    def _bound_before(self, found: list[Binding], at: cst.CSTNode) -> int:
        """How many of `found` (in source order) bind before `at`."""
        return bisect_left(found, self.ctx.order[at], key=_order)

    def _evaluates(self, binding: Binding, at: cst.CSTNode) -> bool:
        """`y = f(y)`: while evaluating the right side, the new `y` is not bound yet."""
        return binding.value is not None and self.ctx.is_inside(at, binding.value)

    def feeding_bindings(self, expr: cst.CSTNode, at: cst.CSTNode | None = None) -> list[Binding]:
        """Every binding whose value can reach `expr` through assignments before `at` (default: expr)."""
        at = at if at is not None else expr
        seen: set[str] = set()
        result: list[Binding] = []
        work = list(values_read_in(expr))
        while work:
            name = work.pop()
            if name in seen:
                continue
            seen.add(name)
            for binding in self.bindings_of(name, at):
                result.append(binding)
                if binding.value is not None:
                    work.extend(values_read_in(binding.value))
                if binding.augmented:
                    work.append(name)
        return result

    def flows_into(self, node: cst.CSTNode, target: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        """Does the value computed at `node` reach `target` (directly or through earlier assignments)?"""
        if self.ctx.is_inside(node, target):
            return True
        return any(b.value is not None and self.ctx.is_inside(node, b.value)
                   for b in self.feeding_bindings(target, at))

    def uses(self, pairs: list[tuple[cst.BaseExpression, cst.CSTNode]]) -> ValueUses:
        """`(target, at)` pairs, indexed to answer `reaches` for any node."""
        return ValueUses(self.ctx, self._flow_graph, pairs)

    def reaches(self, node: cst.CSTNode, uses: ValueUses) -> bool:
        """`any(self.flows_into(node, target, at) for target, at in pairs)` for the pairs `uses` was made
        of, without following each target's bindings back: the names the value at `node` flows into are followed forward
        once, each with the earliest point from which it holds that value (in a script that rebinds
        `loss` in each of 1,000 loops, each question would otherwise read every earlier binding)."""
        ctx = self.ctx
        if any(a in uses.targets for a in (node, *ctx.ancestors(node))) or any(
                self._feeds(node, uses, use) for use in uses.irregular):
            return True
        return any(self._flows_forward(node, chain, latest) for chain, latest in uses.latest.items())

    def _feeds(self, node: cst.CSTNode, uses: ValueUses, use: tuple[cst.BaseExpression, cst.CSTNode]) -> bool:
        """Is `node` inside the value of a binding that feeds the irregular use `use` (`flows_into`)?"""
        values = uses.feeding.get(use)
        if values is None:
            values = uses.feeding[use] = [b.value for b in self.feeding_bindings(*use) if b.value is not None]
        return any(self.ctx.is_inside(node, value) for value in values)

    def _flows_forward(self, node: cst.CSTNode, chain: tuple[Scope, ...], latest: dict[str, int]) -> bool:
        """Does a name read by a use (`latest`: the name, and the last point it is read at) hold the value
        at `node` before that point, as `feeding_bindings` sees bindings from a point whose scopes are `chain`?

        Each name gets the earliest point from which it holds the value: a path of bindings from `node`
        to the name holds from its latest binding (a binding of an enclosing scope, from the start),
        and a use at point P sees a binding of its own scope once that binding's value is evaluated:
        `_flow_graph` times each binding by the end of its value."""
        graph = self._flow_graph
        cutoff = max(latest.values(), default=-1)
        since: dict[str, int] = {}
        queue = [(self._start_time(b, scope, chain), b.name) for a in (node, *self.ctx.ancestors(node))
                 for scope, b in graph.made_at.get(a, ()) if b.value is not None and self.ctx.is_inside(node, b.value)
                 and self._innermost(scope, b.name, chain)]
        heapq.heapify(queue)
        while queue:
            time, name = heapq.heappop(queue)
            if time >= cutoff:
                break  # every name left holds the value too late for any use
            if name in since:
                continue
            since[name] = time
            if time < latest.get(name, -1):
                return True
            for scope in chain:
                for reader, first in graph.readers.get(scope, {}).get(name, {}).items():
                    if reader not in since and self._innermost(scope, reader, chain):
                        heapq.heappush(queue, (max(time, first if scope is chain[0] else -1), reader))
        return False

    def _start_time(self, binding: Binding, scope: Scope, chain: tuple[Scope, ...]) -> int:
        return self._flow_graph.evaluated[binding] if scope is chain[0] else -1

    def _innermost(self, scope: Scope, name: str, chain: tuple[Scope, ...]) -> bool:
        """Is `scope` the innermost of `chain` that binds `name` (whose bindings a point there sees)?"""
        for other in chain:
            if other is scope:
                return True
            if self.ctx.bindings_in(other, name):
                return False
        return False

    @computed
    def _flow_graph(self) -> _FlowGraph:
        return _FlowGraph(self.ctx)

    def resolve_value(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> cst.BaseExpression:
        """Follow a plain name to the value of its last assignment before `at` (one hop at a time)."""
        at = at if at is not None else expr
        for _ in range(8):
            if isinstance(expr, cst.Attribute) and (dotted(expr) or "").startswith("self."):
                return self._attribute_value(dotted(expr)) or expr
            if isinstance(expr, cst.Call):
                returned = self._factory_return(expr)
                if returned is None:
                    return expr
                at, expr = returned
                continue
            if not isinstance(expr, cst.Name):
                return expr
            binding = self.last_binding(expr.value, at)
            if binding is not None and isinstance(binding.node, cst.Param):
                passed = self.caller_argument(binding.node)
                if passed is None:
                    return expr
                at, expr = passed
                continue
            if binding is None or binding.value is None or binding.augmented:
                return expr
            at, expr = binding.node, binding.value
        return expr

    def value_at(self, name: str, at: cst.CSTNode) -> tuple[cst.BaseExpression, cst.CSTNode] | None:
        """The value `name` holds at `at`, and where that value is evaluated: its last assignment's value
        (not an augmented one, nor a `with ... as` target's), or, for a parameter of a function called
        once in this file, the caller's argument (`caller_argument`)."""
        binding = self.last_binding(name, at)
        if binding is None or binding.augmented or isinstance(binding.node, cst.WithItem):
            return None
        if isinstance(binding.node, cst.Param):
            passed = self.caller_argument(binding.node)
            return (passed[1], passed[0]) if passed is not None else None
        return (binding.value, binding.node) if binding.value is not None else None

    def caller_argument(self, param: cst.Param) -> tuple[cst.Call, cst.BaseExpression] | None:
        """For a parameter of a function of this file called once, by name: that call and what it
        passes (`train(model, loader)` → the caller's `model`). The helper's argument is the caller's
        value, however the program was split into functions."""
        parameters = self.ctx.parents.get(param)
        fn = self.ctx.parents.get(parameters) if isinstance(parameters, cst.Parameters) else None
        if not isinstance(fn, cst.FunctionDef) or len(self.ctx.definitions.functions.get(fn.name.value, [])) != 1:
            return None
        sites = self.ctx.definitions.direct_calls.get(fn.name.value, [])
        if len(sites) != 1 or self.ctx.is_inside(sites[0], fn):
            return None
        passed = self.ctx.definitions.argument_for(sites[0], fn, param)
        return None if passed is None else (sites[0], passed)

    def _factory_return(self, call: cst.Call) -> tuple[cst.Return, cst.BaseExpression] | None:
        """For a call of a function of this file (the only one of its name) that returns one value
        (`def build_model(): ...; return model`): that return and its value, where a name it returns is
        then followed. The value made by a factory is the value its caller holds, however the program
        was split into functions."""
        if not isinstance(call.func, cst.Name):
            return None
        functions = self.ctx.definitions.functions.get(call.func.value, [])
        if len(functions) != 1:
            return None
        returns = self.ctx.returns_of(functions[0])
        if len(returns) != 1 or returns[0].value is None:
            return None
        return returns[0], returns[0].value

    def _attribute_value(self, name: str) -> cst.BaseExpression | None:
        """The value assigned to `self.x` in this file, when every assignment agrees on what it calls."""
        if name not in self._attribute_values:
            values = [b.value for b in self.ctx.bindings_anywhere(name) if b.value is not None]
            # What each calls: an imported callee by its qualified name, a class or function of this file by its own.
            callees = {(self.ctx.names.callee(v) or dotted(v.func)) if isinstance(v, cst.Call) else None for v in values}
            self._attribute_values[name] = values[0] if len(callees) == 1 and None not in callees else None
        return self._attribute_values[name]

    def constructed_by(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None,
                       depth: int = 0) -> tuple[cst.Call, str] | None:
        """(call, qualified callee) when `expr` is, or names, the result of calling an imported thing; for a
        parameter of a function called from several places, where every call site passes one (`def
        dist_step(self, strategy, x)` given the one `MirroredStrategy` everywhere)."""
        value = self.resolve_value(expr, at)
        if isinstance(value, cst.Call):
            name = self.ctx.names.callee(value)
            return (value, name) if name else None
        binding = self.last_binding(value.value, value) if isinstance(value, cst.Name) else None
        if binding is None or not isinstance(binding.node, cst.Param) or depth >= _AGREEMENT_DEPTH:
            return None
        found = [self.constructed_by(arg, site, depth + 1) for site, arg in self._arguments_given(binding.node)]
        agreed = {made[1] if made is not None else None for made in found}
        return found[0] if found and len(agreed) == 1 and None not in agreed else None

    def _arguments_given(self, param: cst.Param) -> list[tuple[cst.Call, cst.BaseExpression | None]]:
        """What each call of the parameter's function in this file passes it (None where a call passes
        nothing for it): calls by name, `self.name(...)`, and for a method defined once, `obj.name(...)`."""
        parameters = self.ctx.parents.get(param)
        fn = self.ctx.parents.get(parameters) if isinstance(parameters, cst.Parameters) else None
        definitions = self.ctx.definitions
        if not isinstance(fn, cst.FunctionDef) or len(definitions.functions.get(fn.name.value, [])) != 1:
            return []
        sites = list(definitions.direct_calls.get(fn.name.value, []))
        if any(isinstance(a, cst.ClassDef) for a in self.ctx.ancestors(fn)):
            sites += [c for c in definitions.named(fn.name.value).nodes
                      if isinstance(c.func, cst.Attribute) and c not in sites]
        return [(site, definitions.argument_for(site, fn, param)) for site in sites
                if not self.ctx.is_inside(site, fn)]

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
