"""LL905 discarded-optimizer-state: the rule, its documentation and its examples."""

from __future__ import annotations

import ast
from collections.abc import Callable

import libcst as cst

from lintloop.analysis.iteration import loop_header
from lintloop.analysis.nodes import argument
from lintloop.analysis.optimizer_state import LostResult
from lintloop.rule import HEADLINE_LIMIT, Example, Rule
from lintloop.screen import CallShape, Needs


def _positional_count(call: ast.Call) -> int:
    return sum(not isinstance(argument, ast.Starred) for argument in call.args)


# The screen's tokens for a unit that may hold a finding: an optax optimizer's `update(grads, state[,
# params])` (two or three positional arguments; `dict.update` takes one), and flax's
# `state.apply_gradients(grads=...)` (no positional argument).
OPTAX_UPDATE = CallShape("optax_update", "update", lambda call: 2 <= _positional_count(call) <= 3)
FLAX_APPLY = CallShape("flax_apply", "apply_gradients", lambda call: not _positional_count(call) and any(
    keyword.arg == "grads" for keyword in call.keywords))


class DiscardedOptimizerState(Rule):
    code = "LL905"
    name = "discarded-optimizer-state"
    description = "optax optimizer state discarded (every update is the first)"
    frameworks = ("jax",)
    kind = "bug"
    needs = Needs(file=(("name:optax", "name:flax", "name:jax"),),
                  statement=((OPTAX_UPDATE, "call:apply_updates", FLAX_APPLY),))
    probe = "effect"
    summary = ("In a training loop, or a step function called from one (directly, jitted, or as a `lax.scan` / "
               "`fori_loop` body): the new optimizer state from optax's `tx.update(grads, opt_state, ...)` "
               "discarded (`updates, _ = ...`, `tx.update(...)[0]`, a name never read) or never fed back (the "
               "loop never re-binds the `opt_state` it passes in, itself or through the step function it "
               "calls); or the result of `optax.apply_updates(params, updates)` / flax's "
               "`state.apply_gradients(grads=...)` dropped or never re-bound. Not flagged: a state returned "
               "by the step function and re-bound by the caller, threaded through a scan carry or stored in "
               "`self.`; flax `nnx.Optimizer.update` (in place); one-shot updates outside any loop; "
               "stateless transforms (`optax.sgd` without momentum or schedule, `optax.scale`, clipping). "
               "A state discarded outright is flagged for any optimizer; one only never re-bound, when the "
               "file shows which optimizer it is.")
    why = ("optax is functional: `tx.update` returns the next optimizer state and `optax.apply_updates` the "
           "next parameters; nothing changes in place. A state that is not passed to the next `update` "
           "restarts every step from the one built by `tx.init`: what the optimizer keeps there is lost, "
           "without an error. Measured (optax 0.2.8, CPU): stateless `optax.sgd(lr)` is unaffected; with "
           "momentum, momentum is silently off (updates stay at the first step's -0.05 instead of growing "
           "-0.05, -0.095, -0.1355, ...); Adam's step count stays 0, so every update is its first, "
           "bias-corrected to `lr·sign(g)`; a schedule is frozen at its step-0 value (a warm-up from 0 "
           "leaves every update 0). A dropped `apply_updates` / `apply_gradients` result: the parameters "
           "never change.")
    symptom = ("LL905_bad.py (Adam, `updates, _ = tx.update(...)` in a jitted step that hands the old "
               "state back) prints `step 1: adam count=0 loss=13.4534` ... `step 60: adam count=0 loss=0.0568`: the "
               "count never leaves 0 and from step 30 on the loss is stuck at 0.0568 (sign steps oscillating "
               "around the minimum), while the fixed program prints `step 60: adam count=60 loss=0.0210`. "
               "LL905_apply_bad.py drops `optax.apply_updates(...)`'s result and prints "
               "`loss=13.4534` at every step. No error or warning is raised.")
    remedy = ("Bind the new state back to the name the next step passes in: `updates, opt_state = "
              "tx.update(grads, opt_state, params)`; `params = optax.apply_updates(params, updates)`; "
              "`state = state.apply_gradients(grads=grads)`. A step function returns both and its caller "
              "re-binds them: `params, opt_state, loss = train_step(params, opt_state, batch)`.")
    flagged = (
        Example("""
import jax
import optax

tx = optax.adam(1e-3)
opt_state = tx.init(params)
for batch in batches:
    grads = jax.grad(loss_fn)(params, batch)
    updates, _ = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
""", expect="""
8:18-8:53 new optimizer state from `tx.update(...)` is discarded (`_`)
    help: bind it back to the state the next update reads: `updates, opt_state = tx.update(grads,
        opt_state, params)`
    note: `tx.update(...)` (optax.adam) runs in the loop `for batch in batches` at line 6: every update
        starts from the same state — the step count stays 0, so every step is the first: bias correction
        makes each update `lr·sign(g)`, with no averaging of past gradients
"""),
        Example("""
import jax
import optax

optimizer = optax.sgd(learning_rate=0.1, momentum=0.9)

@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, new_opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), new_opt_state, loss

def train(params, data):
    opt_state = optimizer.init(params)
    for x, y in data:
        params, _, loss = train_step(params, opt_state, x, y)
    return params
""", expect="""
9:30-9:64 `opt_state` is never re-bound by the loop that repeats `optimizer.update(...)`
    help: return the new state from `train_step` and re-bind it in the loop that calls it
    note: `optimizer.update(...)` (optax.sgd (momentum)) runs in `train_step`, called from the loop `for
        x, y in data` at line 15: every update starts from the same state — momentum is silently off:
        each step is plain SGD
"""),
        Example("""
import jax
import optax

def fit(params, tx, data, epochs):
    opt_state = tx.init(params)
    for epoch in range(epochs):
        for x, y in data:
            grads = jax.grad(loss_fn)(params, x, y)
            updates = tx.update(grads, opt_state, params)[0]
            params = optax.apply_updates(params, updates)
    return params
""", expect="""
9:23-9:58 new optimizer state from `tx.update(...)` is discarded (only `[0]`, the updates, is kept)
    help: bind it back to the state the next update reads: `updates, opt_state = tx.update(grads,
        opt_state, params)`
    note: `tx.update(...)` runs in the loop `for x, y in data` at line 7: every update starts from the
        same state — its state (moment estimates, step count, schedule position) restarts from its
        initial value every step
"""),
        Example("""
import jax
import optax
from flax.training import train_state

def train_epoch(state, batches):
    for batch in batches:
        grads = jax.grad(loss_fn)(state.params, batch)
        state.apply_gradients(grads=grads)
    return state
""", expect="""
8:9-8:43 new TrainState from `state.apply_gradients(...)` is dropped (the call's result is never bound)
    help: re-bind the result: `state = state.apply_gradients(grads=grads)`
    note: `state.apply_gradients(...)` runs in the loop `for batch in batches` at line 6: the parameters
        never change
"""),
        Example("""
import jax
import optax

schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000)
tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule))

def body(carry, batch):
    params, opt_state = carry
    grads = jax.grad(loss_fn)(params, batch)
    updates, _ = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), None

params, opt_state = jax.lax.scan(body, (params, opt_state), batches)[0]
""", expect="""
10:18-10:53 new optimizer state from `tx.update(...)` is discarded (`_`)
    help: bind it back (`updates, opt_state = tx.update(grads, opt_state, params)`) and return it in the
        carry
    note: `tx.update(...)` (optax.chain(...)) runs in the body repeated by `jax.lax.scan` at line 13:
        every update starts from the same state — the step count stays 0, so every step is the first:
        bias correction makes each update `lr·sign(g)`, with no averaging of past gradients; the
        learning-rate schedule is frozen at its step-0 value (a warm-up from 0 stays 0: the parameters
        never move)
"""),
    )
    not_flagged = (
        Example("""
import optax
def one_update(opt):
    state = opt.init(params)
    updates, _ = opt.update(grads, state, params)
    return optax.apply_updates(params, updates)
for name, opt in optimizers.items():
    results[name] = one_update(opt)
"""),
        Example("""
import jax
import optax

tx = optax.adam(1e-3)

@jax.jit
def train_step(params, opt_state, x, y):
    grads = jax.grad(loss_fn)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

for x, y in data:
    params, opt_state = train_step(params, opt_state, x, y)
"""),
        Example("""
import jax
import optax

tx = optax.sgd(learning_rate=0.01)
opt_state = tx.init(params)
for x, y in data:
    grads = jax.grad(loss_fn)(params, x, y)
    updates, _ = tx.update(grads, opt_state)
    params = optax.apply_updates(params, updates)
"""),
        Example("""
import jax
import optax

def body(carry, batch):
    params, opt_state = carry
    grads = jax.grad(loss_fn)(params, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), None

(params, opt_state), _ = jax.lax.scan(body, (params, opt_state), batches)
"""),
        Example("""
import jax
import optax
from flax import nnx

optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
for x, y in data:
    grads = nnx.grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
"""),
        Example("""
import jax
import optax

def test_update_shapes():
    opt = optax.adam(1e-3)
    state = opt.init(params)
    updates, _ = opt.update(grads, state, params)
    assert updates["w"].shape == params["w"].shape
"""),
        Example("""
import jax
import optax

class Trainer:
    def step(self, batch):
        grads = jax.grad(self.loss)(self.params, batch)
        updates, self.opt_state = self.tx.update(grads, self.opt_state, self.params)
        self.params = optax.apply_updates(self.params, updates)

    def fit(self, batches):
        for batch in batches:
            self.step(batch)
"""),
        Example("""
import jax
import optax

for name, opt in optimizers.items():
    state = opt.init(params)
    updates, _ = opt.update(grads, state, params)
    results[name] = optax.apply_updates(params, updates)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        states = self.ctx.optimizer_state
        if states.is_update_call(node):
            lost = states.lost_state(node)
            if lost is not None:
                self._report_state(lost)
        elif states.is_apply_call(node):
            lost = states.lost_result(node)
            if lost is not None:
                self._report_result(lost)

    def _where(self, lost: LostResult) -> str:
        """" in the loop `for x in data` at line 6" / " in `train_step`, called from the loop ... at line 14"."""
        ctx = self.ctx
        loop = lost.loop
        if isinstance(loop, (cst.For, cst.While)):
            label = f"the loop `{loop_header(ctx, loop)}`"
        else:
            label = f"`{ctx.snippet(loop.func)}`"
        if not lost.chain:
            return f" in {label} at line {ctx.line_of(loop)}" if isinstance(loop, (cst.For, cst.While)) \
                else f" in the body repeated by {label} at line {ctx.line_of(loop)}"
        function = next(a for a in ctx.ancestors(lost.call) if isinstance(a, cst.FunctionDef))
        return f" in `{function.name.value}`{ctx.calls.describe_chain(lost.chain, label)}"

    def _headline(self, lost: LostResult, make: Callable[[str], str]) -> str:
        """`make(call)` with the call as `tx.update(...)`, its receiver shortened where the headline would not fit."""
        text = ""
        for limit in (40, 24, 12):
            text = make(f"`{self.ctx.snippet(lost.call.func, limit)}(...)`")
            if len(text) <= HEADLINE_LIMIT:
                break
        return text

    def _report_state(self, lost: LostResult) -> None:
        ctx = self.ctx
        optimizer = ctx.optimizer_state.optimizer_of(lost.call)
        call = f"`{ctx.snippet(lost.call.func)}(...)`"
        which = f" ({optimizer.label})" if optimizer.known else ""
        if lost.certain:
            headline = self._headline(lost, lambda call: f"new optimizer state from {call} is {lost.how}")
        else:
            headline = self._headline(lost, lambda call: f"{lost.how} by the loop that repeats {call}")
        note = f"{call}{which} runs{self._where(lost)}: every update starts from the same state — {optimizer.cost}"
        state = argument(lost.call, 1, "state")
        update = (f"`updates, {state.value} = {ctx.snippet(lost.call, 60)}`" if isinstance(state, cst.Name)
                  else "`updates, opt_state = tx.update(grads, opt_state, params)`")
        if lost.chain:  # a step function: the state goes back through its return value
            function = next(a for a in ctx.ancestors(lost.call) if isinstance(a, cst.FunctionDef)).name.value
            help_text = (f"bind it back ({update}), return it from `{function}` and re-bind it in its caller"
                         if lost.certain else
                         f"return the new state from `{function}` and re-bind it in the loop that calls it")
        elif not isinstance(lost.loop, (cst.For, cst.While)):  # a `lax.scan` / `fori_loop` body
            help_text = f"bind it back ({update}) and return it in the carry"
        else:
            help_text = f"bind it back to the state the next update reads: {update}"
        self.report(lost.call, headline, help=help_text, note=note)

    def _report_result(self, lost: LostResult) -> None:
        ctx = self.ctx
        if lost.what == "params":
            what, fix = "the new parameters", "`params = optax.apply_updates(params, updates)`"
        else:
            what, fix = "the new TrainState", "`state = state.apply_gradients(grads=grads)`"
        call = f"`{ctx.snippet(lost.call.func)}(...)`"
        if lost.certain:
            verb = "are" if lost.what == "params" else "is"
            headline = self._headline(lost, lambda call: f"{what[4:]} from {call} {verb} {lost.how}")
            note = f"{call} runs{self._where(lost)}: the parameters never change"
        else:
            headline = self._headline(lost, lambda call: f"{lost.how} by the loop that repeats {call}")
            note = (f"{call} runs{self._where(lost)} and returns {what}, which no later step sees: the parameters "
                    "never change")
        self.report(lost.call, headline, help=f"re-bind the result: {fix}", note=note)
