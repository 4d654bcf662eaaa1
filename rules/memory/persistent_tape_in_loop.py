"""LL304 persistent-tape-in-loop: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.loop_values import IterationUnit
from lintloop.analysis.nodes import argument, call_name, names_in, receiver
from lintloop.rule import Example, Rule
from lintloop.screen import Needs

_TAPES = {"tensorflow.GradientTape", "tensorflow.autodiff.GradientTape"}
# Tape methods that read what the tape recorded.
_TAPE_READS = ("gradient", "jacobian", "batch_jacobian")


class PersistentTapeInLoop(Rule):
    code = "LL304"
    name = "persistent-tape-in-loop"
    description = "a persistent GradientTape created every iteration"
    frameworks = ("tf",)
    kind = "perf"
    probe = "mem"
    needs = Needs(file=(("text:persistent",),), statement=(("call:GradientTape",), ("loop", "repeated")))
    summary = ("`tf.GradientTape(persistent=True)` (any spelling, as `with ... as tape:` or `tape = ...`) "
               "created on every iteration of a loop, read with `tape.gradient` / `jacobian` in the "
               "iteration, and never released with `del tape` (or `tape = None`) in the loop; also in a "
               "train-step function the loop calls that returns the tape to it (`tape, loss = step(x)`). "
               "Not flagged: tapes created outside the loop, non-persistent tapes (released by their first "
               "`gradient` call), tapes inside a `tf.function` (graph code: no Python lifetime), a train-step "
               "function's own tape (freed when the function returns).")
    why = ("A persistent tape keeps every tensor it recorded (the step's forward activations) until the tape "
           "object dies, so that `gradient` can be called more than once. Without `del tape`, the name keeps "
           "the tape alive after its last use, until the next iteration's `with tf.GradientTape(...) as tape:` "
           "rebinds it: while the next step runs its forward pass, the previous step's recording is still "
           "held.")
    symptom = ("No error and no growth (measured, TF 2.21 CPU: 400 eager steps, +7 KiB without `del`, +10 KiB "
               "with): one extra step of recorded tensors at peak, about +90 KiB for a small model, scaling with "
               "the model's activations (re-measured with glibc's counters: `del tape` at the end of a step freed "
               "84 KiB for a 64-256-256-1 MLP on a 256-row batch). LL304_bad.py prints 'persistent tapes alive when step 60 "
               "started: 1' (LL304_good.py: 0); on an accelerator that is a step's activations of device memory. "
               "The probe reports: 'persistent GradientTape entered 59 times; at 58 of the 58 later entries (from "
               "entry 2) the previous step's tape, done recording, was still alive with everything it recorded'.")
    remedy = ("Add `del tape` right after the last `tape.gradient(...)` of the iteration (the TensorFlow guide's "
              "pattern for persistent tapes), or compute the gradients in a train-step function so the tape "
              "dies when it returns.")
    flagged = (
        Example("""
import tensorflow as tf
def train_step(x, y):
    with tf.GradientTape(persistent=True) as tape:
        loss_a = loss_fn(y, head_a(x))
        loss_b = loss_fn(y, head_b(x))
    grads = tape.gradient(loss_a, head_a.trainable_variables) + tape.gradient(loss_b, head_b.trainable_variables)
    opt.apply_gradients(zip(grads, head_a.trainable_variables + head_b.trainable_variables))
    return tape, loss_a + loss_b
for x, y in dataset:
    tape, loss = train_step(x, y)
""", expect="""
3:10-3:42 persistent `tf.GradientTape` `tape` is created every iteration and never deleted
    help: add `del tape` after its last `tape.gradient(...)`
    note: created in `train_step`, which `for x, y in dataset` calls on every iteration: the tape and
        every tensor it recorded (the step's activations) stay alive until the next iteration rebinds
        `tape`: peak memory holds one extra step (not growth)
"""),
        Example("""
import tensorflow as tf
for step, (x, y) in enumerate(dataset):
    with tf.GradientTape(persistent=True) as tape:
        fake = generator(noise)
        g_loss = g_loss_fn(discriminator(fake))
        d_loss = d_loss_fn(discriminator(x), discriminator(fake))
    g_grads = tape.gradient(g_loss, generator.trainable_variables)
    d_grads = tape.gradient(d_loss, discriminator.trainable_variables)
    g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
    d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
""", expect="""
3:10-3:42 persistent `tf.GradientTape` `tape` is created every iteration and never deleted
    help: add `del tape` after its last `tape.gradient(...)`
    note: the tape and every tensor it recorded (the step's activations) stay alive until the next
        iteration rebinds `tape`: peak memory holds one extra step (not growth)
"""),
        Example("""
from tensorflow import GradientTape
def fit(model, batches, opt):
    for x, y in batches:
        tape = GradientTape(persistent=True)
        with tape:
            main, aux = model(x, training=True)
            loss_main = loss_fn(y, main)
            loss_aux = loss_fn(y, aux)
        grads = tape.gradient(loss_main, model.trainable_variables)
        aux_grads = tape.gradient(loss_aux, model.aux_head.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
""", expect="""
4:16-4:45 persistent `tf.GradientTape` `tape` is created every iteration and never deleted
    help: add `del tape` after its last `tape.gradient(...)`
    note: the tape and every tensor it recorded (the step's activations) stay alive until the next
        iteration rebinds `tape`: peak memory holds one extra step (not growth)
"""),
        Example("""
import tensorflow as tf
epoch = 0
while epoch < epochs:
    for x in loader:
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            y = model(x)
        jac = t.batch_jacobian(y, x)
        grads = t.gradient(tf.reduce_sum(jac ** 2), model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    epoch += 1
""", expect="""
5:14-5:46 persistent `tf.GradientTape` `t` is created every iteration and never deleted
    help: add `del t` after its last `t.gradient(...)`
    note: the tape and every tensor it recorded (the step's activations) stay alive until the next
        iteration rebinds `t`: peak memory holds one extra step (not growth)
"""),
        Example("""
import tensorflow as tf
def integrated_gradients(model, inputs, labels, baselines):
    attributions = []
    for point in interpolate(inputs, baselines):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(point)
            loss = loss_fn(labels, model(point))

        def grad_of(x):
            return tape.gradient(loss, x)

        attributions.append(map_features(grad_of, point))
    return attributions
""", expect="""
5:14-5:46 persistent `tf.GradientTape` `tape` is created every iteration and never deleted
    help: add `del tape` after its last `tape.gradient(...)`
    note: the tape and every tensor it recorded (the step's activations) stay alive until the next
        iteration rebinds `tape`: peak memory holds one extra step (not growth)
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
for x, y in dataset:
    with tf.GradientTape(persistent=True) as tape:
        fake = generator(noise)
        g_loss = g_loss_fn(discriminator(fake))
        d_loss = d_loss_fn(discriminator(x), discriminator(fake))
    g_grads = tape.gradient(g_loss, generator.trainable_variables)
    d_grads = tape.gradient(d_loss, discriminator.trainable_variables)
    del tape
    g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
"""),
        Example("""
import tensorflow as tf
def train_step(x, y):
    with tf.GradientTape(persistent=True) as tape:
        loss_a = loss_fn(y, head_a(x))
        loss_b = loss_fn(y, head_b(x))
    ga = tape.gradient(loss_a, head_a.trainable_variables)
    gb = tape.gradient(loss_b, head_b.trainable_variables)
    opt.apply_gradients(zip(ga + gb, head_a.trainable_variables + head_b.trainable_variables))
for x, y in dataset:
    train_step(x, y)
"""),
        Example("""
import tensorflow as tf
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""),
        Example("""
import tensorflow as tf
with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    y = f(x)
for i in range(n_outputs):
    rows.append(tape.gradient(y[i], x))
"""),
        Example("""
import tensorflow as tf
@tf.function
def train_step(batch):
    for x in batch:
        with tf.GradientTape(persistent=True) as tape:
            loss = model(x)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.names.callee(node) not in _TAPES or not _is_true(argument(node, 0, "persistent")):
            return
        unit = ctx.loop_values.iteration_unit(node)
        if unit is None or ctx.tf.compiled_function_of(node) is not None:
            return
        name = self._tape_name(node)
        if name is None or not self._read_in(unit, name) or self._released_in(unit, name):
            return
        if isinstance(unit, cst.FunctionDef) and not self._handed_to_loop(unit, name):
            return  # a step function's local tape is freed when the function returns
        where = f"created {ctx.loop_values.inside(unit)}: " if isinstance(unit, cst.FunctionDef) else ""
        self.report(node, f"persistent `tf.GradientTape` `{name}` is created every iteration and never deleted",
                    help=f"add `del {name}` after its last `{name}.gradient(...)`",
                    note=f"{where}the tape and every tensor it recorded (the step's activations) stay alive until "
                         f"the next iteration rebinds `{name}`: peak memory holds one extra step (not growth)")

    def _handed_to_loop(self, function: cst.FunctionDef, name: str) -> bool:
        """`function` returns the tape and every call of it keeps what it returns (`tape, loss = step(x)`)."""
        ctx = self.ctx
        if not any(r.value is not None and name in names_in(r.value) for r in ctx.returns_of(function)):
            return False
        sites = ctx.calls.call_sites.get(function, [])
        return bool(sites) and all(isinstance(ctx.parents.get(site), (cst.Assign, cst.AnnAssign)) for site in sites)

    def _tape_name(self, call: cst.Call) -> str | None:
        """The name the tape is bound to: `with tf.GradientTape(...) as tape:` or `tape = tf.GradientTape(...)`."""
        parent = self.ctx.parents.get(call)
        if isinstance(parent, cst.WithItem) and parent.asname is not None and isinstance(parent.asname.name, cst.Name):
            return parent.asname.name.value
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
            return parent.targets[0].target.value
        return None

    def _read_in(self, unit: IterationUnit, name: str) -> bool:
        return any(call_name(c) in _TAPE_READS and isinstance(receiver(c), cst.Name) and receiver(c).value == name
                   for c in self.ctx.definitions.calls_in(unit, into_nested_defs=True))

    def _released_in(self, unit: IterationUnit, name: str) -> bool:
        """`del tape` or `tape = None` anywhere in the loop's (or step function's) body."""
        for statement in self.ctx.nodes(cst.Del):
            if self.ctx.is_inside(statement, unit.body) and _deletes(statement.target, name):
                return True
        scope = unit if isinstance(unit, cst.FunctionDef) else self.ctx.scope_of(unit)
        return any(b.value is not None and isinstance(b.value, cst.Name) and b.value.value == "None"
                   and self.ctx.is_inside(b.node, unit.body)
                   for b in self.ctx.bindings_in(scope, name))


def _is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def _deletes(target: cst.BaseExpression, name: str) -> bool:
    if isinstance(target, cst.Name):
        return target.value == name
    if isinstance(target, cst.Tuple):
        return any(_deletes(element.value, name) for element in target.elements)
    return False
