"""Python state a function changes outside itself: what runs once per trace, not per call, when
TensorFlow or JAX traces the function (LL202, LL902)."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.base import Analysis

# Mutating calls whose effect outlives the call.
MUTATORS = frozenset({"append", "extend"})
# Values appended on purpose while tracing: names of watched variables, a trace log line, a tuple of
# shapes, a constant witness (`calls.append(None)` in a test counting traces): trace-time bookkeeping.
_RECORD_NODES = (cst.List, cst.ListComp, cst.Tuple, cst.Dict, cst.DictComp, cst.SimpleString,
                 cst.FormattedString, cst.ConcatenatedString, cst.Integer, cst.Float, cst.Imaginary)
_CONSTANT_NAMES = frozenset({"None", "True", "False"})


def is_trace_record(value: cst.BaseExpression) -> bool:
    """A value written out in place (a display, a string, a constant), not a per-call value."""
    return isinstance(value, _RECORD_NODES) or (isinstance(value, cst.Name) and value.value in _CONSTANT_NAMES)


def declared(function: cst.FunctionDef, name: str) -> str | None:
    """"global" / "nonlocal" when the function declares `name` so (in its own body, not a nested def)."""
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.Global, cst.Nonlocal)) and any(n.name.value == name for n in current.names):
            return "global" if isinstance(current, cst.Global) else "nonlocal"
        if isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(current, (cst.IndentedBlock, cst.SimpleStatementSuite, cst.SimpleStatementLine)):
            stack.extend(current.body)
        elif isinstance(current, cst.Match):  # the one compound statement without a `body`: its cases have one
            stack.extend(current.cases)
        elif isinstance(current, cst.BaseCompoundStatement):
            stack.append(current.body)
            for extra in ("orelse", "handlers", "finalbody"):
                value = getattr(current, extra, None)
                if isinstance(value, (list, tuple)):
                    stack.extend(value)
                elif value is not None:
                    stack.append(value)
        elif isinstance(current, (cst.Else, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase)):
            stack.append(current.body)
    return None


def _is_list(value: cst.BaseExpression | None) -> bool:
    """A list display, comprehension or `list(...)` call."""
    if isinstance(value, (cst.List, cst.ListComp)):
        return True
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "list"


class OuterState(Analysis):
    asks = frozenset({"flow"})

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        return next((a for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef)), None)

    def defined_outside(self, target: cst.BaseExpression, node: cst.CSTNode) -> str | None:
        """How to name `target` when it is a list or a global/nonlocal variable bound outside the
        function that holds `node`; None otherwise (a local, a parameter, something not a list)."""
        ctx = self.ctx
        function = self.enclosing_function(node)
        if function is None:
            return None
        if isinstance(target, cst.Name):
            name = target.value
            kind = declared(function, name)
            if kind:
                return f"the {kind} variable `{name}`"
            if ctx.bindings_in(function, name):
                return None  # a local (or parameter) of the function
            bindings = ctx.flow.bindings_of(name, node, before=False)
            values = [b.value for b in bindings]
            if len(bindings) == 1 and isinstance(bindings[0].node, cst.Param):
                values = [ctx.flow.resolve_value(target, node)]  # a factory's parameter: what its one caller passes
            if values and all(_is_list(v) for v in values):
                return f"`{name}`, a list defined outside the function"
            return None
        if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self":
            name = f"self.{target.attr.value}"
            values = [b for b in ctx.bindings_anywhere(name) if not b.augmented]
            if values and all(_is_list(b.value) and not ctx.is_inside(b.node, function) for b in values):
                return f"`{name}`, a list attribute set outside the function"
        return None

    def local_to_trace(self, target: cst.BaseExpression, node: cst.CSTNode, traced: cst.CSTNode) -> bool:
        """Is `target` a variable of the traced function `traced` itself, or of a function nested in it, that
        `node` (in a function nested there: a step closure) changes? It is created anew on every trace."""
        if not isinstance(target, cst.Name):
            return False
        ctx = self.ctx
        for scope in ctx.enclosing_scopes(node):
            if not isinstance(scope, cst.FunctionDef) or not ctx.is_inside(scope, traced):
                return False
            if ctx.bindings_in(scope, target.value) and not declared(scope, target.value):
                return True
        return False

    def mutation(self, node: cst.Call | cst.AugAssign) -> tuple[cst.BaseExpression, str] | None:
        """(what is changed, how to say it) for `x.append(v)` / `x.extend(v)` of a per-call value and
        `x += v`; None for other nodes."""
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in MUTATORS and node.args \
                    and not is_trace_record(node.args[0].value):
                return func.value, f"`{self.ctx.snippet(func)}(...)`"
            return None
        if isinstance(node.operator, cst.AddAssign):
            return node.target, f"`{self.ctx.snippet(node.target)} += ...`"
        return None
