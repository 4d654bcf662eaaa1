"""LL903 jit-in-loop: the rule, its documentation and its examples."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from lintloop.analysis.loop_values import IterationUnit
from lintloop.analysis.nodes import read_name
from lintloop.rule import HEADLINE_LIMIT, Example, Rule
from lintloop.screen import Needs

# Compiles whose cache is keyed on the function object's identity: a new object, a new compile.
_IDENTITY_CACHED = {"jit", "pjit", "pmap"}
# flax 0.12.8 `nnx.jit` wraps the function in a new `JitFn` / `SimpleJitFn` (dataclass, eq=False) on
# every call and jits that: even a module-level function compiles again on every `nnx.jit(f)`.
_NEW_WRAPPER_EACH_CALL = {"nnx.jit"}
# Methods every flax linen module inherits (`model.apply` is a new bound method on each read).
_FLAX_MODULE_METHODS = {"apply", "init", "init_with_output"}
# Calls that return a new function object each time they run (measured for partial, grad,
# value_and_grad and vmap: 40 compiles for 40 calls of `jax.jit(<call>)`).
_FUNCTION_FACTORIES = {
    "functools.partial", "jax.grad", "jax.value_and_grad", "jax.vmap", "jax.jacfwd", "jax.jacrev",
    "jax.hessian", "jax.checkpoint", "jax.remat", "flax.nnx.grad", "flax.nnx.value_and_grad", "flax.nnx.vmap",
}
_RECOMPILED = "traced and compiled again every iteration"
_RECOMPILES = f"is {_RECOMPILED}"


def _fit(headline: Callable[[int], str]) -> str:
    """The headline with its quoted code as long as fits in HEADLINE_LIMIT characters (shorter code when not)."""
    text = ""
    for limit in (40, 30, 20, 12):
        text = headline(limit)
        if len(text) <= HEADLINE_LIMIT:
            break
    return text


class JitInLoop(Rule):
    code = "LL903"
    name = "jit-in-loop"
    description = "`jax.jit` called inside a loop (recompiles every iteration)"
    shown_in_prose = "tracing"
    frameworks = ("jax",)
    kind = "perf"
    needs = Needs(file=(("name:jax", "name:flax"), ("name:jit", "name:pmap", "name:pjit"), ("jax_traced",)),
                  statement=(("loop", "repeated"), ("name:jit", "name:pmap", "name:pjit")))
    probe = "trace"
    summary = ("`jax.jit(...)` / `jax.pmap(...)` / `pjit(...)` (any spelling, also `partial(jax.jit, ...)(f)` "
               "and a `@jax.jit` def) inside a loop body (or a function the loop calls on every iteration), applied to a function object created in that "
               "iteration — a lambda, a `def` in the loop body, a `functools.partial(...)`, a `jax.grad` / "
               "`value_and_grad` / `vmap` / `jacfwd` / `checkpoint` call, a same-file factory returning an "
               "inner function, or a bound method `self.method` — and called in the same iteration (at once, "
               "or by the name it is bound to, in that loop and not in a loop nested inside it). Also "
               "`nnx.jit(f)` in a loop for any `f`: flax wraps the function in a new object on every call. "
               "Not flagged: `jax.jit(f)` of a module-level function (JAX caches by the function's identity), "
               "a jitted function called only after the loop or in an inner loop (one compile per model or "
               "configuration of a loop over them), and loops of a few iterations known from the code (a "
               "literal collection of configurations, `range(k)` with a literal k <= 16).")
    why = ("`jax.jit` and `jax.pmap` cache the traced and compiled program on the function object they are "
           "given. A lambda, an inner `def`, a `partial`, the function `jax.grad(f)` returns, or a bound "
           "method read again (`self.step` makes a new method object each time) is a new object on every "
           "iteration: its first call traces, lowers and compiles with XLA again, which costs far more than "
           "running a small step. Measured on CPU, jax 0.10.2: each of these compiled 40 times in 40 calls "
           "(34-64 ms per call against 0.01 ms for the hoisted function), while `jax.jit(f)` of the same "
           "module-level `f` re-created each iteration compiled once.")
    symptom = ("LL903_bad.py jits a lambda (closing over the batch) inside its step loop and "
               "prints `20 compiles in 20 steps, 488.52 ms per step after the first` (JAX's "
               "`/jax/core/compile/backend_compile_duration` events; 490-1,150 ms on a loaded 2-core CPU); "
               "with the jit hoisted out of the loop (LL903_good.py) it prints `1 compiles in "
               "20 steps, 0.12 ms per step after the first`. Nothing warns.")
    remedy = ("Create the jitted function once, before the loop, from a function that takes what changes per "
              "iteration (the batch, the parameters, the step) as arguments: `step = jax.jit(train_step)` "
              "outside, `params, loss = step(params, batch)` inside. Values that select different code "
              "go in `static_argnums` (one compile per distinct value).")
    flagged = (
        Example("""
import jax
def train_step(params, x, y):
    grads = jax.jit(jax.grad(loss_fn))(params, x, y)
    return params - 0.1 * grads
for step in range(num_steps):
    params = train_step(params, *next(batches))
""", expect="""
3:13-3:39 `jax.jit` of `jax.grad(loss_fn)` is traced and compiled again every iteration
    help: create `jax.jit(jax.grad(loss_fn))` once, before the loop, and pass what changes per iteration
        as arguments
    note: `jax.grad(loss_fn)` makes a new function object each time it runs, and the jitted function is
        made and called in the same iteration: JAX caches compiles by function object (measured: 40
        compiles in 40 calls); it runs in `train_step`, which `for step in range(num_steps)` calls on
        every iteration
"""),
        Example("""
import jax
def loss_fn(params, x, y):
    return ((x @ params - y) ** 2).mean()
for step in range(num_steps):
    x, y = next(batches)
    grads = jax.jit(jax.grad(loss_fn))(params, x, y)
    params = params - 0.1 * grads
""", expect="""
6:13-6:39 `jax.jit` of `jax.grad(loss_fn)` is traced and compiled again every iteration
    help: create `jax.jit(jax.grad(loss_fn))` once, before the loop, and pass what changes per iteration
        as arguments
    note: `jax.grad(loss_fn)` makes a new function object each time it runs, and the jitted function is
        made and called in the same iteration: JAX caches compiles by function object (measured: 40
        compiles in 40 calls)
"""),
        Example("""
import jax
import optax
for batch in train_ds:
    loss, grads = jax.jit(lambda p: jax.value_and_grad(compute_loss)(p, batch))(params)
    updates, opt_state = tx.update(grads, opt_state)
    params = optax.apply_updates(params, updates)
""", expect="""
4:19-4:80 `jax.jit` of a lambda is traced and compiled again every iteration
    help: jit it once, before the loop, and pass what changes per iteration as arguments
    note: the lambda is a new function object on every iteration, and the jitted function is made and
        called in the same iteration: JAX caches compiles by function object (measured: 40 compiles in
        40 calls)
"""),
        Example("""
from functools import partial
import jax
def train_epoch(state, train_ds, model):
    for batch in train_ds:
        step = jax.jit(partial(train_step, model=model))
        state, metrics = step(state, batch)
    return state
""", expect="""
5:16-5:57 `jax.jit` of `partial(train_step, model=model)` is traced and compiled again every iteration
    help: create `jax.jit(partial(train_step, model=model))` once, before the loop, and pass what
        changes per iteration as arguments
    note: `partial(train_step, model=model)` makes a new function object each time it runs, and the
        jitted function is made and called in the same iteration: JAX caches compiles by function object
        (measured: 40 compiles in 40 calls)
"""),
        Example("""
import jax
class Trainer:
    def train_step(self, state, batch):
        return state
    def fit(self, state, batches):
        for batch in batches:
            state = jax.jit(self.train_step)(state, batch)
        return state
""", expect="""
7:21-7:45 `jax.jit` of the bound method `self.train_step` is traced and compiled again every iteration
    help: create `jax.jit(self.train_step)` once, before the loop, and pass what changes per iteration
        as arguments
    note: reading `self.train_step` makes a new method object each time, and the jitted function is made
        and called in the same iteration: JAX caches compiles by function object (measured: 40 compiles
        in 40 calls)
"""),
        Example("""
import jax
from flax import linen as nn
class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(x)
model = CNN()
for images, labels in test_loader:
    logits = jax.jit(model.apply)({"params": params}, images)
""", expect="""
9:14-9:34 `jax.jit` of the bound method `model.apply` is traced and compiled again every iteration
    help: create `jax.jit(model.apply)` once, before the loop, and pass what changes per iteration as
        arguments
    note: reading `model.apply` makes a new method object each time, and the jitted function is made and
        called in the same iteration: JAX caches compiles by function object (measured: 40 compiles in
        40 calls)
"""),
        Example("""
import jax
while not done:
    @jax.jit
    def policy(params, obs):
        return actor.apply(params, obs + noise)
    action = policy(params, obs)
    obs, done = env.step(action)
""", expect="""
3:5-3:13 `@jax.jit` on `policy`, defined inside a loop: traced and compiled again every iteration
    help: define `policy` once, before the loop, and pass what changes per iteration as arguments
    note: each iteration defines a new function and calls it: JAX caches compiles by function object
        (measured: 40 compiles in 40 calls)
"""),
        Example("""
from flax import nnx
def train_step(model, optimizer, batch):
    return model
for step in range(steps):
    nnx.jit(train_step)(model, optimizer, next(batches))
""", expect="""
5:5-5:24 `nnx.jit(train_step)` inside a loop is traced and compiled again every iteration
    help: apply `nnx.jit(train_step)` once, before the loop, and call the result in it
    note: flax wraps the function in a new object on every `nnx.jit` call, and the result is called in
        the same iteration
"""),
    )
    not_flagged = (
        Example("""
import jax
import jax.numpy as jnp
def evaluate(params, batches):
    accuracy = jax.jit(lambda p, x, y: jnp.mean(predict(p, x).argmax(-1) == y))
    return sum(accuracy(params, x, y) for x, y in batches) / len(batches)
for step, batch in enumerate(train_batches):
    params, opt_state = train_step(params, opt_state, batch)
    if step % eval_every == 0:
        print(step, evaluate(params, test_batches))
"""),
        Example("""
import jax
@jax.jit
def train_step(params, x, y):
    grads = jax.jit(jax.grad(loss_fn))(params, x, y)
    return params - 0.1 * grads
for step in range(num_steps):
    params = train_step(params, *next(batches))
"""),
        Example("""
import jax
def loss_fn(params, x, y):
    return ((x @ params - y) ** 2).mean()
for step in range(num_steps):
    loss = jax.jit(loss_fn)(params, x, y)
"""),
        Example("""
import jax
grad_fn = jax.jit(jax.grad(loss_fn))
for step in range(num_steps):
    params = params - 0.1 * grad_fn(params, next(batches))
"""),
        Example("""
import jax
for model in models:
    predict = jax.jit(lambda p, x: model.apply(p, x))
    for batch in test_ds:
        outputs.append(predict(params[model.name], batch))
"""),
        Example("""
import jax
compiled = {}
for name, fn in registry.items():
    compiled[name] = jax.jit(lambda x: fn(x) * 2)
"""),
        Example("""
import jax
import jax.numpy as jnp
for dtype in (jnp.float32, jnp.bfloat16):
    out = jax.jit(lambda x: x.astype(dtype) * 2)(x)
"""),
        Example("""
import jax
import jax.numpy as jnp
for i in range(3):
    out = jax.jit(lambda x: jnp.roll(x, i))(x)
"""),
        Example("""
import jax
for step in range(num_steps):
    fn = lambda p: loss_fn(p, batch)
    lowered = jax.jit(fn).lower(params)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Call) and self.ctx.jax.wrapping(node.func) is not None:
            return  # `jax.jit(f)(x)`: a call of the compiled function, not a transform applied to `x`
        transform = self.ctx.jax.wrapping(node)
        if transform is None or transform.kind not in _IDENTITY_CACHED | _NEW_WRAPPER_EACH_CALL:
            return
        unit = self.ctx.loop_values.iteration_unit(node)
        if unit is None or self._few_iterations(unit) or not self._called_in(node, unit) \
                or self.ctx.loop_values.reached_periodically(node, unit):
            return  # a compile every N steps (`if step % eval_every == 0`) is paid once per N steps
        ctx = self.ctx
        if transform.kind in _NEW_WRAPPER_EACH_CALL:
            self.report(node, _fit(lambda limit: f"`{ctx.snippet(node, limit)}` {self._where(unit)} {_RECOMPILES}"),
                        help=f"apply `{ctx.snippet(node, 40)}` once, before the loop, and call the result in it",
                        note="flax wraps the function in a new object on every `nnx.jit` call, and the result is "
                             f"called in the same iteration{self._runs_in(unit)}")
            return
        new = self._new_function(self.ctx.jax.applied_function(node), unit)
        if new is not None:
            named, why = new
            hoisted = "jit it" if named(40) == "a lambda" else f"create `{ctx.snippet(node, 45)}`"
            self.report(node, _fit(lambda limit: f"`{ctx.snippet(node.func, limit)}` of {named(limit)} {_RECOMPILES}"),
                        help=f"{hoisted} once, before the loop, and pass what changes per iteration as arguments",
                        note=f"{why}, and the jitted function is made and called in the same iteration: JAX "
                             "caches compiles by function object (measured: 40 compiles in 40 calls)"
                             f"{self._runs_in(unit)}")

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        unit = self.ctx.loop_values.iteration_unit(node)
        if unit is None or self._few_iterations(unit) or self.ctx.loop_values.reached_periodically(node, unit):
            return
        ctx = self.ctx
        for decorator in node.decorators:
            transform = ctx.jax.transform_of(decorator.decorator)
            if transform is not None and transform.kind in _IDENTITY_CACHED | _NEW_WRAPPER_EACH_CALL \
                    and self._name_called_in(node.name.value, node, unit):
                name = node.name.value
                headline = _fit(lambda limit, spelled=decorator.decorator, name=name: (
                    f"`@{ctx.snippet(spelled, limit)}` on `{name}`, defined {self._where(unit)}: {_RECOMPILED}"))
                self.report(decorator, headline,
                            help=f"define `{name}` once, before the loop, and pass what changes per iteration as "
                                 "arguments",
                            note="each iteration defines a new function and calls it: JAX caches compiles by function "
                                 "object (measured: 40 compiles in 40 calls)"
                                 + (f"; `{name}` is defined {ctx.loop_values.inside(unit)}"
                                    if isinstance(unit, cst.FunctionDef) else ""))
                return

    def _where(self, unit: IterationUnit) -> str:
        """Where a headline says the code runs: "inside a loop", or "in `train_step`" (a function a loop calls)."""
        return f"in `{unit.name.value}`" if isinstance(unit, cst.FunctionDef) else "inside a loop"

    def _runs_in(self, unit: IterationUnit) -> str:
        """For a note: "; it runs in `train_step`, which `for x in data` calls on every iteration"."""
        return f"; it runs {self.ctx.loop_values.inside(unit)}" if isinstance(unit, cst.FunctionDef) else ""

    # ----- is the jitted function run in the iteration that made it -------------------------------
    def _few_iterations(self, unit: IterationUnit) -> bool:
        return self.ctx.loop_values.few_iterations(self.ctx.loop_values.calling_loop(unit))

    def _called_in(self, node: cst.Call, unit: IterationUnit) -> bool:
        """`jax.jit(f)(x)`, or `name = jax.jit(f)` followed by `name(...)` in `unit` itself."""
        parent = self.ctx.parents.get(node)
        if isinstance(parent, cst.Call) and parent.func is node:
            return True
        assign = self.ctx.statement_of(node)
        target = assign.body[0] if isinstance(assign, cst.SimpleStatementLine) else None
        if isinstance(target, cst.Assign) and target.value is node and len(target.targets) == 1 \
                and isinstance(target.targets[0].target, cst.Name):
            return self._name_called_in(target.targets[0].target.value, node, unit)
        return False

    def _name_called_in(self, name: str, after: cst.CSTNode, unit: IterationUnit) -> bool:
        ctx = self.ctx
        return any(isinstance(c.func, cst.Name) and c.func.value == name and ctx.order[c] > ctx.order[after]
                   and ctx.loop_values.iteration_unit(c) is unit for c in ctx.definitions.calls_in(unit))

    # ----- is the function object new each iteration ----------------------------------------------
    def _new_function(self, expr: cst.BaseExpression | None, unit: IterationUnit,
                      depth: int = 0) -> tuple[Callable[[int], str], str] | None:
        """When `expr` is a function object made anew on every iteration of `unit`: how a headline names it
        (given a length for the code it quotes) and the clause that says why it is new."""
        ctx = self.ctx
        if expr is None or depth > 3:
            return None
        if isinstance(expr, cst.Lambda):
            return (lambda limit: "a lambda"), "the lambda is a new function object on every iteration"
        if isinstance(expr, cst.Call):
            callee = ctx.names.callee(expr)
            if callee in _FUNCTION_FACTORIES:
                return ((lambda limit: f"`{ctx.snippet(expr, limit)}`"),
                        f"`{ctx.snippet(expr, 40)}` makes a new function object each time it runs")
            factory = ctx.calls.local_functions(expr.func) if isinstance(expr.func, cst.Name) else []
            if len(factory) == 1 and self._returns_inner_function(factory[0]):
                return ((lambda limit: f"`{ctx.snippet(expr, limit)}`"),
                        f"`{ctx.snippet(expr, 40)}` returns a new inner function each time it runs")
            return None
        if isinstance(expr, cst.Attribute):
            if self._is_bound_method(expr):
                return ((lambda limit: f"the bound method `{ctx.snippet(expr, limit)}`"),
                        f"reading `{ctx.snippet(expr, 40)}` makes a new method object each time")
            return None
        if isinstance(expr, cst.Name):
            binding = ctx.flow.last_binding(expr.value, expr)
            if binding is None or binding.augmented or ctx.loop_values.iteration_unit(binding.node) is not unit:
                return None
            if isinstance(binding.node, cst.FunctionDef):
                return (lambda limit: f"`{expr.value}`"), f"`{expr.value}` is a function defined in the loop body"
            inner = self._new_function(binding.value, unit, depth + 1)
            if inner is None:
                return None
            return (lambda limit: f"`{expr.value}`"), f"`{expr.value}` is bound in the loop body: {inner[1]}"
        return None

    def _returns_inner_function(self, fn: cst.FunctionDef) -> bool:
        """Every `return` of `fn` gives a lambda or a def defined inside `fn`: a closure factory."""
        ctx = self.ctx
        inner = {d.name.value for d in ctx.nodes_in_scope(cst.FunctionDef, fn).nodes}
        returns = ctx.returns_of(fn)
        return bool(returns) and all(isinstance(r.value, cst.Lambda) or (
            isinstance(r.value, cst.Name) and r.value.value in inner) for r in returns)

    def _is_bound_method(self, expr: cst.Attribute) -> bool:
        """`self.m` in a method of a class that defines `m`, or `obj.m` for `obj = C(...)` of a class
        defined here with a method `m` (not a staticmethod), or `apply` / `init` of a flax linen module
        (`model = nn.Dense(3)`, or a class here deriving from `nn.Module`): reading it makes a new
        method object."""
        ctx = self.ctx
        owner = expr.value
        if read_name(owner) is None:  # `model.apply`, `self.fn`, `self.model.apply`
            return False
        cls: cst.ClassDef | None = None
        method = next((a for a in ctx.ancestors(expr) if isinstance(a, cst.FunctionDef)), None)
        params = method.params.params if method is not None else ()
        if params and isinstance(owner, cst.Name) and params[0].name.value == owner.value:
            cls = next((a for a in ctx.ancestors(method) if isinstance(a, cst.ClassDef)), None)
            if cls is not None and ctx.parents.get(ctx.parents.get(method)) is not cls:
                cls = None  # a nested function's first parameter, not a method's `self`
        if cls is None:
            value = ctx.flow.resolve_value(owner, expr)
            if not isinstance(value, cst.Call):
                return False
            constructor = ctx.names.callee(value) or ""
            if expr.attr.value in _FLAX_MODULE_METHODS and constructor.startswith("flax.linen.") \
                    and constructor.rsplit(".", 1)[-1][:1].isupper():
                return True
            cls = ctx.definitions.local_class(value.func)
        if cls is None or not isinstance(cls.body, cst.IndentedBlock):
            return False
        if expr.attr.value in _FLAX_MODULE_METHODS and any(
                ctx.names.qualname(base.value) == "flax.linen.Module" for base in cls.bases):
            return True
        return any(isinstance(s, cst.FunctionDef) and s.name.value == expr.attr.value
                   and not any(isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod"
                               for d in s.decorators)
                   for s in cls.body.body)
