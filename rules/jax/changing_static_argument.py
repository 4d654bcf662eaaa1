"""LL904 changing-static-argument: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.jax import JaxTransform
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

_COMPILES = {"jit", "pjit", "pmap", "nnx.jit", "nnx.pmap"}
# Constructors whose objects hash by identity (or hash new closures): a new one per iteration is a new
# static value. optax transforms and schedules are NamedTuples of fresh closures (measured: a new
# `optax.adam(1e-3)` per call compiled 40 times in 40 calls).
_IDENTITY_HASHED_ROOTS = ("optax.",)
_FUNCTION_FACTORIES = {"functools.partial"}
_EQUALITY_METHODS = {"__eq__", "__hash__"}


class ChangingStaticArgument(Rule):
    code = "LL904"
    name = "changing-static-argument"
    description = "a changing static argument of a jitted function (recompiles)"
    shown_in_prose = "tracing"
    frameworks = ("jax",)
    kind = "perf"
    needs = Needs(file=(("name:jax", "name:flax"),
                        ("text:static_arg", "text:static_broadcasted_arg"), ("jax_traced",)),
                  statement=(("loop",),))
    probe = "trace"
    summary = ("A call, inside a loop (or a function the loop calls every iteration), of a jitted function (`@jax.jit` / `@partial(jax.jit, ...)` / "
               "`jax.jit(f, ...)` / `jax.pmap(f, static_broadcasted_argnums=...)` / `nnx.jit`, any spelling) "
               "that passes, in a position its `static_argnums` / `static_argnames` make static, a value "
               "that changes every iteration: the index of `for i in range(...)` / `enumerate(...)` / "
               "`itertools.count()`, a counter `n += 1`, arithmetic on one (`0.1 / (1 + step)`), a "
               "number computed from one in the loop (`lr = schedule(step)` with an optax schedule or a "
               "same-file function returning arithmetic), or an object built in the loop that hashes by "
               "identity (`optax.adam(lr)`, a lambda, a `partial`, an instance of a plain class of this "
               "file). Positions map both ways through the def's signature: a static positional "
               "parameter passed by keyword, and a `static_argnames` parameter passed positionally, are "
               "static too. Not flagged: constants, values fixed before the loop, flags and buckets that "
               "repeat (`step % 2 == 0`, `step // 100`, `len(batch)`), loop variables over other iterables, "
               "and loops of a few iterations known from the code (`range(k)` with a literal k <= 16, a "
               "literal collection): a handful of compiles, usually one per layer or configuration.")
    why = ("JAX keys a jitted function's cache on the values of its static arguments (by `hash` and `==`): "
           "each new value traces, lowers and compiles the function again. Measured on CPU, jax 0.10.2: a "
           "step counter passed as a static argument compiled 40 times in 40 calls (and 60 in 60), "
           "35-55 ms per call against about 1 ms; a per-step float learning rate and a new `optax.adam(1e-3)` "
           "each call did the same. A bool flag compiles twice, three shape buckets three times; the same "
           "value passed once positionally and once by keyword is two cache entries.")
    symptom = ("LL904_bad.py passes its step counter as a static argument of the jitted train "
               "step and prints `20 compiles in 20 steps, 607.23 ms per step after the first` (`60 compiles in "
               "60 steps` with `--steps 60`); passed as a traced argument (LL904_good.py) it "
               "prints `1 compiles in 20 steps, 0.07 ms per step after the first`. JAX does not warn.")
    remedy = ("Pass the changing value as a traced argument (remove it from `static_argnums` / "
              "`static_argnames`; use it with `jnp` / `lax` operations, e.g. `jnp.where` or `lax.cond` "
              "instead of a Python `if`), or compute it inside the jitted function from a traced step "
              "(`schedule(step)` with an optax schedule works on traced values). Build objects such as "
              "optimizers once, before the loop.")
    flagged = (
        Example("""
import jax
def update(params, grads, lr):
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
fast_update = jax.jit(update, static_argnames="lr")
def train_step(params, grads, epoch):
    lr = 0.1 * 0.95 ** epoch
    return fast_update(params, grads, lr)
for epoch in range(epochs):
    params = train_step(params, grads_fn(params), epoch)
""", expect="""
7:39-7:41 static argument `lr` of the jitted `update` changes every iteration
    help: pass `lr` as a traced argument (drop it from `static_argnames`)
    note: it is given `lr`, computed each iteration from the parameter `epoch` of `train_step`, called
        at line 9 with the loop variable `epoch`, so JAX compiles the function again for each new value
        (measured: 60 compiles in 60 steps)
"""),
        Example("""
from functools import partial
import jax
@partial(jax.jit, static_argnums=(2,))
def train_step(params, batch, step):
    return params
for step in range(num_steps):
    params = train_step(params, next(batches), step)
""", expect="""
7:48-7:52 static argument `step` of the jitted `train_step` changes every iteration
    help: pass `step` as a traced argument (drop it from `static_argnums`)
    note: it is given the loop variable `step`, so JAX compiles the function again for each new value
        (measured: 60 compiles in 60 steps)
"""),
        Example("""
import jax
def update(params, grads, lr):
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
fast_update = jax.jit(update, static_argnames="lr")
for epoch in range(epochs):
    lr = 0.1 * 0.95 ** epoch
    params = fast_update(params, grads, lr)
""", expect="""
7:41-7:43 static argument `lr` of the jitted `update` changes every iteration
    help: pass `lr` as a traced argument (drop it from `static_argnames`)
    note: it is given `lr`, computed each iteration from the loop variable `epoch`, so JAX compiles the
        function again for each new value (measured: 60 compiles in 60 steps)
"""),
        Example("""
import jax
import optax
def apply_tx(grads, opt_state, tx):
    return tx.update(grads, opt_state)
step_fn = jax.jit(apply_tx, static_argnums=2)
for batch in loader:
    tx = optax.adam(1e-3)
    updates, opt_state = step_fn(grads, opt_state, tx)
""", expect="""
8:52-8:54 static argument `tx` of the jitted `apply_tx` is a new object every iteration
    help: build `tx` once, before the loop, and pass the same object every iteration
    note: it is given `tx` (= `optax.adam(1e-3)`), built each iteration: static arguments are cache keys
        and this object hashes by identity, so every iteration compiles again (measured: 40 compiles in
        40 calls for a new `optax.adam(...)` per call)
"""),
        Example("""
import jax
def decode(params, tokens, position):
    return tokens
decode_step = jax.jit(decode, static_argnums=2)
i = 0
while i < max_len:
    tokens = decode_step(params, tokens, position=i)
    i += 1
""", expect="""
7:42-7:52 static argument `position` of the jitted `decode` changes every iteration
    help: pass `position` as a traced argument (drop it from `static_argnums`)
    note: it is given the counter `i`, incremented in the loop, so JAX compiles the function again for
        each new value (measured: 60 compiles in 60 steps)
"""),
    )
    not_flagged = (
        Example("""
from functools import partial
import jax
@partial(jax.jit, static_argnames=("train",))
def apply_model(state, batch, train):
    return state
for epoch in range(epochs):
    for batch in train_ds:
        state = apply_model(state, batch, train=True)
    for batch in test_ds:
        apply_model(state, batch, train=False)
"""),
        Example("""
from functools import partial
import jax
import jax.numpy as jnp
@jax.jit
def train_step(params, batch, step):
    return params
for step in range(num_steps):
    params = train_step(params, next(batches), jnp.asarray(step))
"""),
        Example("""
from functools import partial
import jax
@partial(jax.jit, static_argnums=(2,))
def train_step(params, batch, log_every):
    return params
log_every = 100
for step in range(num_steps):
    params = train_step(params, next(batches), log_every)
"""),
        Example("""
from functools import partial
import jax
@partial(jax.jit, static_argnums=(1,))
def forward(params, is_eval, x):
    return x
for step in range(num_steps):
    out = forward(params, step % eval_every == 0, next(batches))
"""),
        Example("""
from functools import partial
import jax
@partial(jax.jit, static_argnums=2)
def apply_block(params, x, index):
    return x @ params[index]
for i in range(4):
    x = apply_block(params, x, i)
"""),
        Example("""
import jax
import optax
tx = optax.adam(1e-3)
train_step = jax.jit(make_step, static_argnums=2)
for step in range(num_steps):
    params = train_step(params, batch, tx)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        loops = ctx.loop_values.repeating_loops(node)
        if not node.args or all(ctx.loop_values.few_iterations(loop) for loop in loops):
            return  # no loop, or only loops of a few iterations (one compile per layer or configuration)
        compiled = ctx.jax.compiled_callee(node)
        if compiled is None or compiled[1].kind not in _COMPILES:
            return
        fn, transform = compiled
        if not transform.static_argnums and not transform.static_argnames:
            return
        for arg, parameter in self._static_args(node, fn, transform):
            static = "`static_argnames`" if parameter in transform.static_argnames else "`static_argnums`"
            why = ctx.loop_values.per_iteration_number(arg.value, node)
            if why is not None:
                self.report(arg, f"static argument `{parameter}` of {self._describe(node, fn)} changes every "
                                 "iteration",
                            help=f"pass `{parameter}` as a traced argument (drop it from {static})",
                            note=f"it is given {why}, so JAX compiles the function again for each new value "
                                 "(measured: 60 compiles in 60 steps)")
                return
            built = self._new_object(arg.value, node)
            if built is not None:
                self.report(arg, f"static argument `{parameter}` of {self._describe(node, fn)} is a new object every "
                                 "iteration",
                            help=f"build `{ctx.snippet(arg.value, 40)}` once, before the loop, and pass the same "
                                 "object every iteration",
                            note=f"it is given {built}, built each iteration: static arguments are cache keys and "
                                 "this object hashes by identity, so every iteration compiles again (measured: 40 "
                                 "compiles in 40 calls for a new `optax.adam(...)` per call)")
                return

    def _describe(self, call: cst.Call, fn: cst.FunctionDef | cst.Lambda | None) -> str:
        if isinstance(fn, cst.FunctionDef):
            return self.ctx.jax.describe(fn)
        return f"the jitted `{self.ctx.snippet(call.func, 30)}`"

    # ----- which arguments are static ------------------------------------------------------------
    def _static_args(self, call: cst.Call, fn: cst.FunctionDef | cst.Lambda | None,
                     transform: JaxTransform) -> list[tuple[cst.Arg, str]]:
        """The arguments of `call` in static positions, with the parameter name (or `#i`) for messages.
        JAX maps `static_argnums` to parameter names and `static_argnames` to positions through the
        signature (measured: both are static either way)."""
        signature, shift = self._signature(call, fn, transform)
        positions = {n if n >= 0 or signature is None else len(signature) + n for n in transform.static_argnums}
        names = set(transform.static_argnames)
        if signature is not None:
            names |= {signature[i] for i in positions if 0 <= i < len(signature)}
            positions |= {signature.index(n) for n in transform.static_argnames if n in signature}
        found = []
        for index, arg in enumerate(call.args):
            if arg.star:
                break
            if arg.keyword is not None:
                if arg.keyword.value in names:
                    found.append((arg, arg.keyword.value))
            elif index + shift in positions:
                position = index + shift
                found.append((arg, signature[position] if signature and position < len(signature) else f"#{position}"))
        return found

    def _signature(self, call: cst.Call, fn: cst.FunctionDef | cst.Lambda | None,
                   transform: JaxTransform) -> tuple[list[str] | None, int]:
        """The parameter names the static argument numbers count, and where `call`'s first argument
        falls in them: a jitted method called as `self.m(x)` passes `self` first (argnums count it); a
        jitted bound method `jax.jit(self.m)` does not have it. None for a partial or an unknown callee."""
        if fn is None:
            return None, 0
        params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
        is_method = isinstance(fn, cst.FunctionDef) and isinstance(self.ctx.parents.get(self.ctx.parents.get(fn)),
                                                                   cst.ClassDef)
        decorated = isinstance(fn, cst.FunctionDef) and any(d.decorator is transform.site for d in fn.decorators)
        if decorated:
            return params, 1 if is_method and isinstance(call.func, cst.Attribute) else 0
        applied = self.ctx.jax.applied_function(transform.site) if isinstance(transform.site, cst.Call) else None
        if isinstance(applied, cst.Call) and self.ctx.names.callee(applied) == "functools.partial":
            return None, 0
        if is_method and isinstance(applied, cst.Attribute):
            return params[1:], 0
        return params, 0

    # ----- objects built each iteration ----------------------------------------------------------
    def _new_object(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> str | None:
        """How to name `expr` when it is an object built in the loop around `at` that hashes by identity."""
        ctx = self.ctx
        if isinstance(expr, cst.Lambda):
            return "a lambda"
        if isinstance(expr, cst.Call):
            callee = ctx.names.callee(expr) or ""
            if callee in _FUNCTION_FACTORIES or callee.startswith(_IDENTITY_HASHED_ROOTS) \
                    or self._plain_class(expr.func):
                return f"`{ctx.snippet(expr, 40)}`"
            return None
        if isinstance(expr, cst.Name) and depth < 3:
            binding = ctx.flow.last_binding(expr.value, at)
            if binding is None or binding.value is None or binding.augmented:
                return None
            if not ctx.loop_values.bound_each_iteration(binding.node, at):
                return None
            inner = self._new_object(binding.value, binding.node, depth + 1)
            return f"`{expr.value}` (= {inner})" if inner is not None else None
        return None

    def _plain_class(self, func: cst.BaseExpression) -> bool:
        """A class of this file without bases, decorators or `__eq__`/`__hash__`: hashed by identity."""
        cls = self.ctx.definitions.local_class(func)
        if cls is None or cls.bases or cls.decorators or not isinstance(cls.body, cst.IndentedBlock):
            return False
        return not any(isinstance(s, cst.FunctionDef) and s.name.value in _EQUALITY_METHODS for s in cls.body.body)
