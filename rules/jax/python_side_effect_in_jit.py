"""LL902 python-side-effect-in-jit: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.intent import TRACE_READ_TOKENS
from lintloop.analysis.jax import TRACING_FILE_NEEDS
from lintloop.analysis.outer_state import declared
from lintloop.rule import HEADLINE_LIMIT, Example, Rule
from lintloop.screen import Needs


class PythonSideEffectInJit(Rule):
    code = "LL902"
    name = "python-side-effect-in-jit"
    description = "a Python side effect in code JAX traces"
    shown_in_prose = "tracing"
    frameworks = ("jax",)
    # A JAX import, something that traces, and a mutation in the unit; `TRACE_READ_TOKENS`: the units that
    # may read a trace counter (`print(len(traces))`), which decide whether it counts traces on purpose.
    needs = Needs(file=TRACING_FILE_NEEDS,
                  statement=(("call:append", "call:extend", "augassign", "global", *TRACE_READ_TOKENS),))
    probe = "trace"
    summary = ("Inside code JAX traces (as LL206: a `jax.jit` / `pmap` / `nnx.jit` function, a `lax.scan` / "
               "`fori_loop` / `while_loop` / `cond` body, or a same-file helper called only from them): "
               "`.append`/`.extend` on a list, or `+=` on a list, defined outside the function (a module's or "
               "enclosing function's list, a `self.x` attribute initialised as a list), or an assignment "
               "(`=`, `+=`, ...) to a `global`/`nonlocal` variable. Appending a record written out "
               "in place (a list/tuple/dict display or comprehension, a string, a constant such as `None`) is "
               "taken as deliberate trace-time bookkeeping (counting traces) and not flagged; so is a trace "
               "counter or trace log (`nonlocal n; n += 1`, `traces.append(x)`) whose value is read to count "
               "traces: asserted (`assert n == 1`, `self.assertEqual(...)`, `np.testing.assert_equal(...)`), or "
               "compared or printed as a trace count (the counter's name or the text says trace/compile: "
               "`print(\"compiles:\", n)`, `if num_traces > 1:`). A counter never read, or read as data (a "
               "step for a schedule, losses averaged later), is still flagged.")
    why = ("JAX runs a traced function's Python body only while tracing it (the first call, and again for each "
           "new input shape, dtype or static argument); later calls run the compiled program, which holds no "
           "Python. A list appended to, or a global counter incremented, changes once per trace, not once per "
           "call, and what it holds are tracers, not values (using them later raises "
           "`UnexpectedTracerError`).")
    symptom = ("LL902_bad.py increments a global `step_count` inside its `@jax.jit` train step, "
               "called 20 times: `step_count = 1 after 20 steps`. A module-level list appended to in a jitted "
               "function called 3 times holds one entry, `JitTracer(float32[2])`, and `history[0] + 1` raises "
               "`UnexpectedTracerError: Encountered an unexpected tracer.` (jax 0.10.2).")
    remedy = ("Return the value from the traced function and update the Python state in the caller "
              "(`history.append(float(loss))`, `step += 1` in the loop), or keep it in the traced state: a "
              "step counter in the train state (`state.step + 1`), values stacked by `lax.scan`'s outputs.")
    flagged = (
        Example("""
import jax
step_count = 0
@jax.jit
def train_step(params, x):
    global step_count
    step_count += 1
    return params - 0.1 * jax.grad(loss_fn)(params, x)
""", expect="""
6:5-6:20 `step_count += ...` in the jitted `train_step` runs only at trace time, not on every call
    help: return the value to the caller and update `step_count` there, or carry it in the traced state
    note: it changes the global variable `step_count`, but only when JAX traces the function (the first
        call and each retrace)
"""),
        Example("""
import jax
from functools import partial
losses = []
@partial(jax.jit, donate_argnums=(0,))
def update(state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)
    losses.append(loss)
    return state.apply_gradients(grads=grads)
""", expect="""
7:5-7:24 `losses.append(...)` in the jitted `update` runs only at trace time, not on every call
    help: return the value to the caller and update `losses` there, or carry it in the traced state
    note: it changes `losses`, a list defined outside the function, but only when JAX traces the
        function (the first call and each retrace)
"""),
        Example("""
import jax
class Trainer:
    def __init__(self):
        self.grad_norms = []
        self.step = jax.jit(self._step)
    def _step(self, params, batch):
        grads = jax.grad(self.loss)(params, batch)
        self.grad_norms.append(optax.global_norm(grads))
        return params
""", expect="""
8:9-8:57 `self.grad_norms.append(...)` in the jitted `_step` runs only at trace time, not on every call
    help: return the value to the caller and update `self.grad_norms` there, or carry it in the traced
        state
    note: it changes `self.grad_norms`, a list attribute set outside the function, but only when JAX
        traces the function (the first call and each retrace)
"""),
        Example("""
from jax import lax
def rollout(env_step, state, n):
    visited = []
    def body(carry, _):
        nxt = env_step(carry)
        visited.append(nxt)
        return nxt, nxt.reward
    return lax.scan(body, state, None, length=n), visited
""", expect="""
6:9-6:28 `visited.append(...)` in the `scan` body `body` runs only at trace time, not on every call
    help: return the value to the caller and update `visited` there, or carry it in the traced state
    note: it changes `visited`, a list defined outside the function, but only when JAX traces the
        function (the first call and each retrace)
"""),
        Example("""
import jax
last_loss = None
@jax.jit
def train_step(params, x):
    global last_loss
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    last_loss = loss
    return params - 0.1 * grads
""", expect="""
7:5-7:21 `last_loss = loss` in the jitted `train_step` runs only at trace time, not on every call
    help: return the value to the caller and update `last_loss` there, or carry it in the traced state
    note: it changes the global variable `last_loss`, but only when JAX traces the function (the first
        call and each retrace)
"""),
        Example("""
import jax
step = 0
@jax.jit
def train_step(params, x):
    global step
    step = step + 1
    return params - 0.1 * jax.grad(loss_fn)(params, x)
for x in batches:
    params = train_step(params, x)
    if step % 100 == 0:
        print("step", step, "lr", schedule(step))
""", expect="""
6:5-6:20 `step = step + 1` in the jitted `train_step` runs only at trace time, not on every call
    help: return the value to the caller and update `step` there, or carry it in the traced state
    note: it changes the global variable `step`, but only when JAX traces the function (the first call
        and each retrace)
"""),
    )
    not_flagged = (
        Example("""
import jax
import numpy as np
def test_update_compiles_once():
    compiles = 0
    @jax.jit
    def update(params, grads):
        nonlocal compiles
        compiles += 1
        return params - 0.1 * grads
    for _ in range(3):
        params = update(np.ones(2), np.ones(2))
    np.testing.assert_equal(compiles, 1)
"""),
        Example("""
import jax
traced_shapes = []
@jax.jit
def loss(x):
    traced_shapes.append(x.shape)
    return (x ** 2).sum()
def run(xs):
    return [loss(x) for x in xs]
run([jax.numpy.ones(3), jax.numpy.ones(4)])
assert len(traced_shapes) == 2
"""),
        Example("""
import jax
n_traces = 0
def body(carry, x):
    global n_traces
    n_traces += 1
    return carry + x, carry
total, _ = jax.lax.scan(body, 0.0, jax.numpy.arange(5.0))
print(n_traces)
"""),
        Example("""
import jax
@jax.jit
def unroll(x):
    outputs = []
    for i in range(4):
        x = x * 2
        outputs.append(x)
    return jax.numpy.stack(outputs)
"""),
        Example("""
import jax
history = []
@jax.jit
def train_step(params, x):
    return params, jax.numpy.mean(x)
for x in batches:
    params, loss = train_step(params, x)
    history.append(float(loss))
"""),
        Example("""
import jax
trace_log = []
@jax.jit
def f(x):
    trace_log.append(("f", x.shape))
    return x + 1
"""),
        Example("""
import jax
def test_cond_traces_each_branch_once():
    calls = []
    def branch(x):
        calls.append(None)
        return x * 2
    jax.lax.cond(True, branch, branch, 1.0)
    assert len(calls) == 1
"""),
        Example("""
import jax
from functools import partial
@partial(jax.jit, static_argnames="n")
def step(state, n):
    count = state.count
    count += 1
    return state.replace(count=count)
"""),
        Example("""
import jax
step = 0
@jax.jit
def train_step(params, x):
    return params - 0.1 * x
for x in batches:
    params = train_step(params, x)
    step += 1
"""),
        Example("""
import jax
seen = []
def host_log(x):
    seen.append(x)
@jax.jit
def f(x):
    jax.debug.callback(host_log, x)
    return x
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        self._check(node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, cst.AddAssign):
            self._check(node)  # a list's `+=` too
        elif isinstance(node.target, cst.Name):
            self._check_declared(node, node.target)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self._check_declared(node, target.target)

    def _check_declared(self, node: cst.Assign | cst.AugAssign, name: cst.Name) -> None:
        function = self.ctx.outer_state.enclosing_function(node)
        kind = declared(function, name.value) if function is not None else None
        if kind is not None:
            self._report(node, name, f"`{self.ctx.snippet(node, 40)}`", f"the {kind} variable `{name.value}`")

    def _check(self, node: cst.Call | cst.AugAssign) -> None:
        outer = self.ctx.outer_state
        mutation = outer.mutation(node)
        if mutation is not None:
            target, action = mutation
            outside = outer.defined_outside(target, node)
            if outside is not None:
                self._report(node, target, action, outside)

    def _report(self, node: cst.CSTNode, target: cst.BaseExpression, action: str, outside: str) -> None:
        jax = self.ctx.jax
        traced = jax.traced_chain(node)
        if traced is None or self.ctx.outer_state.local_to_trace(target, node, traced[1]) \
                or self.ctx.intent.counts_traces(node, target, traced[1]) \
                or self.ctx.intent.shown_call_by_call(traced[1]):
            return  # a variable of the trace itself; a trace counter read to count traces counts them on purpose
        chain, fn = traced
        if chain:  # a helper the traced function calls: named in the headline, its call chain in the note
            helper = next(a for a in self.ctx.ancestors(node) if isinstance(a, cst.FunctionDef))
            where = f"`{helper.name.value}`"
            called = f"; {where} is{self.ctx.calls.describe_chain(chain, jax.describe(fn))[1:]}"
        else:
            where, called = jax.describe(fn), ""
        headline = f"{action} in {where} runs only at trace time, not on every call"
        if len(headline) > HEADLINE_LIMIT:
            headline = f"{action} in {where} runs only at trace time"
        self.report(node, headline,
                    help=f"return the value to the caller and update `{self.ctx.snippet(target, 40)}` there, or "
                         "carry it in the traced state",
                    note=f"it changes {outside}, but only when JAX traces the function (the first call and each "
                         f"retrace){called}")
