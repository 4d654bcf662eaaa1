"""Values that change on every iteration of a loop: loop indices, counters, and numbers computed from them.

Framework-neutral: a compiled function (tf.function, jax.jit with static arguments) keyed on such a
Python value traces or compiles once per iteration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from lintloop.analysis.base import Analysis
from lintloop.analysis.calls import CALLER_DEPTH, REPEAT_DEPTH
from lintloop.analysis.iteration import loop_header
from lintloop.analysis.nodes import call_name, remainder_in

if TYPE_CHECKING:
    from lintloop.analysis.context import FileContext

# A loop, or a function that runs once per iteration of loops in its callers (`iteration_unit`).
IterationUnit = cst.For | cst.While | cst.FunctionDef

# Iterables wrapped by progress bars: `for i in tqdm(range(n))` counts like `range(n)`.
_PROGRESS_BARS = {"tqdm", "trange"}
# Arithmetic that keeps a changing number changing (`step + 1`, `0.1 / (1 + step)`, `decay ** step`);
# `step % 2`, `step // 100`, `step > 10`, `step & 1` take only a few values.
_INJECTIVE_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power)
# Builtins that keep a changing number changing.
_NUMBER_CASTS = {"float", "int", "abs"}
# How many assignments deep `per_iteration_number` follows a name (`lr = base * decay`; `scale = lr * 2`).
_DEPTH = 4
# A loop of at most this many iterations, known from its text, runs a bounded number of them: one
# compile per iteration is a handful, and usually one per configuration (layers, dtypes, test cases).
FEW_ITERATIONS = 16
_COLLECTIONS = (cst.List, cst.Tuple, cst.Set, cst.Dict)


class LoopValues(Analysis):
    asks = frozenset({"calls", "definitions", "flow", "jax", "tf"})

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._repeated: dict[cst.FunctionDef, cst.For | cst.While | None] = {}

    def iteration_unit(self, node: cst.CSTNode) -> IterationUnit | None:
        """The code that runs once per iteration around `node`: the innermost loop whose body holds it
        within its function, else that function when it runs once per iteration of loops in its callers
        (a step function the training loop calls, `for batch in data: train_step(batch)`, however the
        program was split into functions). None at module level and for a function with no call here."""
        loop = self.ctx.innermost_loop(node)
        if loop is not None:
            return loop
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, (cst.ClassDef, cst.Lambda)):
                return None
            if isinstance(ancestor, cst.FunctionDef):
                return ancestor if self.calling_loop(ancestor) is not None else None
        return None

    def calling_loop(self, unit: IterationUnit) -> cst.For | cst.While | None:
        """The loop that repeats `unit`: the loop itself, or for a function, the loop around its (first)
        call site, through callers: every same-file call of it runs in a loop body, or in a function that
        does, `REPEAT_DEPTH` deep. Never a traced function (a tf.function or a jitted function runs its
        Python body once per trace, not per call) nor a call site in one."""
        if not isinstance(unit, cst.FunctionDef):
            return unit
        if unit not in self._repeated:
            ctx = self.ctx
            chain = None
            if not self._traced(unit):
                chain = ctx.calls.through_callers(
                    unit.body, lambda n: not isinstance(n, cst.BaseSuite) and ctx.innermost_loop(n) is not None
                    and not self._traced_around(n), depth=REPEAT_DEPTH)
            self._repeated[unit] = ctx.innermost_loop(chain[-1]) if chain else None
        return self._repeated[unit]

    def inside(self, unit: IterationUnit) -> str:
        """How a message says where code in `unit` is: "inside a loop", or "in `train_step`, which
        `for x, y in dataset` calls on every iteration"."""
        if not isinstance(unit, cst.FunctionDef):
            return "inside a loop"
        loop = self.calling_loop(unit)
        return f"in `{unit.name.value}`, which `{loop_header(self.ctx, loop)}` calls on every iteration"

    def _traced(self, fn: cst.FunctionDef) -> bool:
        jax = self.ctx.jax
        return fn in self.ctx.tf.compiled_functions or fn in jax.compiled_functions or fn in jax.traced_bodies

    def _traced_around(self, node: cst.CSTNode) -> bool:
        return any(self._traced(scope) for scope in self.ctx.enclosing_scopes(node)
                   if isinstance(scope, cst.FunctionDef))

    def under_periodic_guard(self, node: cst.CSTNode) -> bool:
        """In a branch of `if ... % N ...:` (or `x if ... % N ... else y`), or right of `step % N == 0 and`,
        within its loop body or function: run every N iterations, not every one."""
        previous = node
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, (cst.For, cst.While, cst.FunctionDef, cst.Lambda)):
                return False
            if isinstance(ancestor, (cst.If, cst.IfExp)) and previous is not ancestor.test \
                    and remainder_in(ancestor.test):
                return True
            if isinstance(ancestor, cst.BooleanOperation) and isinstance(ancestor.operator, cst.And) \
                    and previous is ancestor.right and remainder_in(ancestor.left):
                return True
            previous = ancestor
        return False

    def reached_periodically(self, node: cst.CSTNode, unit: IterationUnit) -> bool:
        """Does the iteration `unit` reach `node` only every N iterations: `node` under a `% N` guard, or,
        in a function the loop calls, every call of it under one (`if step % eval_every == 0: evaluate()`)?
        A cost paid there is paid every N steps: its total is the per-step one divided by N."""
        if self.under_periodic_guard(node):
            return True
        sites = self.ctx.calls.call_sites.get(unit, []) if isinstance(unit, cst.FunctionDef) else []
        return bool(sites) and all(self.under_periodic_guard(site) for site in sites)

    def loops_around(self, node: cst.CSTNode) -> list[cst.For | cst.While]:
        """The `for` / `while` loops whose body holds `node`, innermost first, within its function."""
        loops = []
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                break
            if isinstance(ancestor, (cst.For, cst.While)) and self.ctx.is_inside(node, ancestor.body):
                loops.append(ancestor)
        return loops

    def repeating_loops(self, node: cst.CSTNode) -> list[cst.For | cst.While]:
        """The loops around `node` in its function (`loops_around`), else the loop that calls the function
        holding it on every iteration (`iteration_unit`)."""
        loops = self.loops_around(node)
        if loops:
            return loops
        unit = self.iteration_unit(node)
        loop = self.calling_loop(unit) if unit is not None else None
        return [loop] if loop is not None else []

    def bound_each_iteration(self, binding: cst.CSTNode, at: cst.CSTNode) -> bool:
        """Is `binding` (of a name read at `at`) in the body of a loop around `at`, or in the function
        holding `at` when that function runs once per iteration (`iteration_unit`): a new value each time?"""
        if any(self.ctx.is_inside(binding, loop.body) for loop in self.loops_around(at)):
            return True
        unit = self.iteration_unit(at)
        return isinstance(unit, cst.FunctionDef) and self.ctx.scope_of(binding) is unit

    def few_iterations(self, loop: cst.For | cst.While) -> bool:
        """A `for` over a literal collection (`for dtype in (jnp.float32, jnp.bfloat16)`, also its
        `.items()` / `enumerate(...)`, or a name assigned one) or over `range(k)` with a literal k
        of at most FEW_ITERATIONS."""
        if not isinstance(loop, cst.For):
            return False
        iterable = loop.iter
        if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute) and not iterable.args \
                and iterable.func.attr.value in ("items", "keys", "values"):
            iterable = iterable.func.value
        elif isinstance(iterable, cst.Call) and self.ctx.names.is_builtin(iterable.func, "enumerate") \
                and iterable.args:
            iterable = iterable.args[0].value
        if isinstance(self.ctx.flow.resolve_value(iterable, loop), _COLLECTIONS):
            return True
        if isinstance(iterable, cst.Call) and self.ctx.names.is_builtin(iterable.func, "range") \
                and 1 <= len(iterable.args) <= 2 and all(isinstance(a.value, cst.Integer) for a in iterable.args):
            bounds = [int(a.value.value, 0) for a in iterable.args]  # type: ignore[attr-defined]
            return bounds[-1] - (bounds[0] if len(bounds) == 2 else 0) <= FEW_ITERATIONS
        return False

    def changing_number(self, expr: cst.BaseExpression, at: cst.CSTNode) -> str | None:
        """Is `expr` (at `at`, inside loops of its function) a Python number that changes on every
        iteration of an enclosing loop — the index of `for i in range(...)` / `enumerate(...)` /
        `itertools.count()`, or a counter `n += 1` in the loop — or simple arithmetic on one
        (`i + 1`, not `i % 2`)? Returns how to name it in a message, else None."""
        if isinstance(expr, cst.BinaryOperation):
            if not isinstance(expr.operator, _INJECTIVE_OPERATORS):
                return None
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                if isinstance(other, (cst.Integer, cst.Float, cst.Name)):
                    found = self.changing_number(side, at)
                    if found is not None:
                        return found
            return None
        if not isinstance(expr, cst.Name):
            return None
        name = expr.value
        for loop in self.loops_around(at):
            if isinstance(loop, cst.For) and self._counts(loop, name):
                return f"the loop variable `{name}`"
            if self._incremented_in(loop, name, at):
                return f"the counter `{name}`, incremented in the loop"
        return None

    def per_iteration_number(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> str | None:
        """Like `changing_number`, and also a number computed from one in the loop body: arithmetic
        (`0.1 / (1 + step)`, `base * decay ** step`), `float(...)` / `int(...)` of one, a same-file
        function returning arithmetic on its argument (`lr_at(step)`), or a name assigned one of these
        in the loop before `at` (`lr = schedule(step)`). Returns how to name it in a message, else None."""
        if depth > _DEPTH:
            return None
        found = self.changing_number(expr, at)
        if found is not None:
            return found
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _INJECTIVE_OPERATORS):
            return self.per_iteration_number(expr.left, at, depth + 1) or \
                self.per_iteration_number(expr.right, at, depth + 1)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            return self.per_iteration_number(expr.expression, at, depth + 1)
        if isinstance(expr, cst.Call) and len(expr.args) >= 1 and expr.args[0].keyword is None \
                and not expr.args[0].star and self._keeps_number(expr):
            return self.per_iteration_number(expr.args[0].value, at, depth + 1)
        if isinstance(expr, cst.Name):
            return self._assigned_in_loop(expr, at, depth) or self.changing_through_callers(expr, at)
        return None

    def parameter_of(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[cst.FunctionDef, cst.Param] | None:
        """The function around `at` and its parameter that `expr` names, when the function never re-binds it."""
        function = self.ctx.scope_of(at)
        if not isinstance(expr, cst.Name) or not isinstance(function, cst.FunctionDef):
            return None
        bindings = self.ctx.bindings_in(function, expr.value)
        if not bindings or not all(isinstance(b.node, cst.Param) for b in bindings):
            return None
        return function, bindings[0].node  # type: ignore[return-value]

    def changing_through_callers(self, expr: cst.BaseExpression, at: cst.CSTNode,
                                 depth: int = CALLER_DEPTH) -> str | None:
        """Is `expr` a parameter of the (eager) function around `at`, never re-bound there, that a call of
        that function gives a number changing every iteration of a loop around the call (`changing_number`;
        or, helpers out, a parameter of its own function that is)? A step function the loop calls with its
        index. Returns how to name the chain in a message, else None."""
        ctx = self.ctx
        passed_on = self.parameter_of(expr, at)
        if passed_on is None or depth == 0 or ctx.tf.traced_function_of(at) is not None \
                or ctx.jax.traced_chain(at) is not None:
            return None  # in a traced function, the caller's own call is the one that retraces
        function, param = passed_on
        for site in ctx.calls.call_sites.get(function, ()):
            passed = ctx.definitions.argument_for(site, function, param)
            if passed is None:
                continue
            changing = self.changing_number(passed, site) or self.changing_through_callers(passed, site, depth - 1)
            if changing is not None:
                return (f"the parameter `{param.name.value}` of `{function.name.value}`, called at line "
                        f"{ctx.line_of(site)} with {changing}")
        return None

    def _assigned_in_loop(self, name: cst.Name, at: cst.CSTNode, depth: int) -> str | None:
        """`name` last assigned, in the body of a loop around `at`, a number computed per iteration."""
        binding = self.ctx.flow.last_binding(name.value, at)
        if binding is None or binding.value is None or binding.augmented:
            return None
        if not self.bound_each_iteration(binding.node, at):
            return None
        inner = self.per_iteration_number(binding.value, binding.node, depth + 1)
        if inner is None:
            return None
        return f"`{name.value}`, computed each iteration from {inner}"

    def _keeps_number(self, call: cst.Call) -> bool:
        """`float(x)` / `int(x)` / `abs(x)`, an optax schedule (`optax.cosine_decay_schedule(...)`, by
        name or inline), or a same-file function returning arithmetic on its parameters: a value that
        changes with its first argument."""
        names = self.ctx.names
        func = call.func
        if any(names.is_builtin(func, b) for b in _NUMBER_CASTS):
            return True
        schedule = self.ctx.flow.resolve_value(func, call)
        if isinstance(schedule, cst.Call):
            qualname = names.callee(schedule) or ""
            if qualname.startswith("optax.") and "schedule" in qualname:
                return True
        local = self.ctx.calls.local_functions(func) if isinstance(func, cst.Name) else []
        return len(local) == 1 and self._returns_arithmetic(local[0])

    def _returns_arithmetic(self, fn: cst.FunctionDef) -> bool:
        """Every `return` of `fn` (not of nested defs) is arithmetic that uses its first parameter."""
        params = [*fn.params.posonly_params, *fn.params.params]
        if not params:
            return False
        first = params[0].name.value
        returns = self.ctx.returns_of(fn)
        return bool(returns) and all(r.value is not None and _arithmetic_on(r.value, first) for r in returns)

    def _counts(self, loop: cst.For, name: str) -> bool:
        """`for name in range(...)`, `for name, x in enumerate(...)`, `for name in itertools.count()`
        (also through `tqdm(...)` / `trange(...)`)."""
        iterable = loop.iter
        if isinstance(iterable, cst.Call) and call_name(iterable) in _PROGRESS_BARS and iterable.args:
            if call_name(iterable) == "trange":
                return isinstance(loop.target, cst.Name) and loop.target.value == name
            iterable = iterable.args[0].value
        if not isinstance(iterable, cst.Call):
            return False
        names = self.ctx.names
        if names.is_builtin(iterable.func, "range") or names.callee(iterable) == "itertools.count":
            return isinstance(loop.target, cst.Name) and loop.target.value == name
        if names.is_builtin(iterable.func, "enumerate") and isinstance(loop.target, cst.Tuple):
            first = loop.target.elements[0].value if loop.target.elements else None
            return isinstance(first, cst.Name) and first.value == name
        return False

    def _incremented_in(self, loop: cst.For | cst.While, name: str, at: cst.CSTNode) -> bool:
        """`name += <number>` in the loop's body (same function), and every plain assignment of
        `name` a number literal: a Python counter."""
        bumped = any(isinstance(a.target, cst.Name) and a.target.value == name
                     and isinstance(a.operator, cst.AddAssign) and isinstance(a.value, (cst.Integer, cst.Float))
                     and self.ctx.scope_of(a) is self.ctx.scope_of(at)
                     for a in self.ctx.nodes_within(cst.AugAssign, loop.body))
        if not bumped:
            return False
        plain = [b for b in self.ctx.flow.bindings_of(name, at, before=False) if not b.augmented]
        return bool(plain) and all(isinstance(b.value, (cst.Integer, cst.Float)) for b in plain)


def _arithmetic_on(expr: cst.BaseExpression, param: str) -> bool:
    """`expr` is built only of numbers, names, attribute reads, calls and `+ - * / **`, and reads `param`."""
    uses = False
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            uses = uses or node.value == param
        elif isinstance(node, cst.BinaryOperation):
            if not isinstance(node.operator, _INJECTIVE_OPERATORS):
                return False
            stack.extend((node.left, node.right))
        elif isinstance(node, cst.UnaryOperation):
            stack.append(node.expression)
        elif isinstance(node, cst.Call):
            stack.extend(a.value for a in node.args)
        elif not isinstance(node, (cst.Integer, cst.Float, cst.Attribute)):
            return False  # a comparison, a conditional, a subscript: may take only a few values
    return uses
