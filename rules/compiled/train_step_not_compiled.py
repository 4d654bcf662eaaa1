"""LL203 train-step-not-compiled: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis import FileContext
from lintloop.analysis.nodes import call_name, walk
from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import Needs

# Builtins that behave the same traced: they act on Python structure, not on tensor values.
_PURE_BUILTINS = {"zip", "range", "len", "list", "tuple", "dict", "isinstance", "enumerate", "min", "max",
                  "sorted", "reversed", "getattr", "hasattr", "super"}
# Methods whose traced version does what the eager one does (TensorFlow / Keras state is graph state).
_GRAPH_METHODS = {"gradient", "apply_gradients", "minimize", "watch", "update_state", "reset_state",
                  "reset_states", "result", "assign", "assign_add", "assign_sub", "get_shape", "items",
                  "values", "keys", "compute_loss", "stop_recording"}
# Statements that mean Python state or control that a trace runs once, or differently.
_UNSAFE_STATEMENTS = (cst.Global, cst.Nonlocal, cst.Try, cst.Raise, cst.Del, cst.Yield, cst.Await, cst.AugAssign)


class TrainStepNotCompiled(Rule):
    code = "LL203"
    name = "train-step-not-compiled"
    description = "a custom train step that is not compiled with tf.function"
    frameworks = ("tf",)
    kind = "perf"
    default_on = False
    needs = Needs(file=(("call:apply_gradients",),), statement=(("call:apply_gradients",), ("call:gradient",)))
    fix_kind = "safe (add `@tf.function`)"
    summary = ("A function that calls both `tape.gradient` and `optimizer.apply_gradients` (once per call, not "
               "in a loop of its own: a step, not an epoch), not a tf.function "
               "(nor a Keras `train_step`, nor called from a traced function), called inside a loop (or from a "
               "function the loop calls on every iteration): every step runs op by op, eagerly.")
    why = ("Eager execution dispatches each op from Python; a tf.function traces the step once and runs it "
           "as a graph (fused, without per-op Python overhead), typically several times faster for small "
           "and medium models.")
    symptom = ("LL203_bad.py: `tf.executing_eagerly()` is True inside the step at every call "
               "(\"train step ran eagerly: every op dispatched from Python\"); the same losses as the fixed "
               "program. Measured on CPU (TF 2.21, a shared 2-core machine): a two-layer Dense model, batch 32, "
               "SGD: 24.7 ms per eager step, 0.78 ms per step once the same function is wrapped in `tf.function`.")
    remedy = "Decorate the step with `@tf.function` (its trace runs once; keep Python side effects out of it)."
    fix_safety = ("Safe, and offered, only when compiling cannot change what the step does: a module-level "
                  "function (not re-created per call), the file imports `tensorflow` as a name, the step "
                  "calls only TensorFlow/Keras APIs, objects it is given (`model(x)`, `loss_fn(y, p)`), the "
                  "graph-safe methods (`gradient`, `apply_gradients`, `update_state`, `assign` ...), pure "
                  "builtins (`zip`, `len` ...) and same-file functions that qualify too; no `.numpy()`, "
                  "`print`, NumPy, logging, `float()`/`int()`, attribute or `global` writes, `+=`, "
                  "`try`/`raise`, `tf.Variable(...)` creation; and no call site passes it a Python number that "
                  "changes every iteration (it would retrace each call: LL205). Otherwise no fix.")
    flagged = (
        Example("""
import tensorflow as tf
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss
def run_batch(x, y):
    return float(train_step(x, y))
for x, y in dataset:
    history.append(run_batch(x, y))
""", expect="""
2:5-2:15 training step `train_step` is called in a loop but runs eagerly, op by op
    help: decorate it with `@tf.function`
    note: it computes and applies gradients on every call, each op dispatched from Python; as a
        tf.function it runs as one traced graph, typically several times faster
"""),
        Example("""
import tensorflow as tf
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
for x, y in dataset:
    train_step(x, y)
""", expect="""
2:5-2:15 training step `train_step` is called in a loop but runs eagerly, op by op
    help: decorate it with `@tf.function`
    note: it computes and applies gradients on every call, each op dispatched from Python; as a
        tf.function it runs as one traced graph, typically several times faster
"""),
        Example("""
import numpy as np
import tensorflow as tf
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss.numpy()
losses = [train_step(x, y) for x, y in dataset]
for epoch in range(3):
    losses.append(train_step(x0, y0))
""", expect="""
3:5-3:15 training step `train_step` is called in a loop but runs eagerly, op by op
    help: decorate it with `@tf.function`
    note: it computes and applies gradients on every call, each op dispatched from Python; as a
        tf.function it runs as one traced graph, typically several times faster
"""),
        Example("""
import tensorflow as tf
class Agent:
    def update(self, batch):
        with tf.GradientTape() as tape:
            loss = self.loss(batch)
        grads = tape.gradient(loss, self.net.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.net.trainable_variables))
    def train(self, buffer, steps):
        for _ in range(steps):
            self.update(buffer.sample())
""", expect="""
3:9-3:15 training step `update` is called in a loop but runs eagerly, op by op
    help: decorate it with `@tf.function`
    note: it computes and applies gradients on every call, each op dispatched from Python; as a
        tf.function it runs as one traced graph, typically several times faster
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
class Trainer:
    def fit_epoch(self):
        for batch in self.train_dataloader:
            with tf.GradientTape() as tape:
                loss = self.model.training_step(batch)
            grads = tape.gradient(loss, self.model.trainable_variables)
            self.optim.apply_gradients(zip(grads, self.model.trainable_variables))
            self.train_batch_idx += 1
    def fit(self):
        for self.epoch in range(self.max_epochs):
            self.fit_epoch()
"""),
        Example("""
import tensorflow as tf
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss
for x, y in dataset:
    train_step(x, y)
"""),
        Example("""
import tensorflow as tf
class Net(tf.keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x, y, self(x))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        return {"loss": loss}
"""),
        Example("""
import tensorflow as tf
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss
@tf.function
def train_epoch(dataset):
    for x, y in dataset:
        step(x, y)
"""),
        Example("""
import tensorflow as tf
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss
train_step(x0, y0)
"""),
    )

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        ctx, tf = self.ctx, self.ctx.tf
        calls = list(ctx.definitions.calls_in(node))
        # One update per call: a function that loops over batches itself (an epoch) is not a step.
        if not any(call_name(c) == "apply_gradients" and ctx.innermost_loop(c) is None for c in calls) \
                or not any(tf.tape_of_gradient(c) is not None for c in calls):
            return
        if node in tf.compilations or node in tf.keras_steps or tf.traced_function_of(node) is not None:
            return
        sites = ctx.calls.call_sites.get(node, [])
        if not any(ctx.loop_values.iteration_unit(s) is not None or _in_comprehension(ctx, s) for s in sites):
            return
        if any(tf.traced_chain(s) is not None for s in sites):
            return  # called from a traced function: it is compiled there
        alias = ctx.names.alias_of("tensorflow") or "tf"
        headline = f"training step `{node.name.value}` is called in a loop but runs eagerly, op by op"
        if len(headline) > 100:
            headline = f"training step `{node.name.value}` runs eagerly, op by op, in a loop"
        self.report(node.name, headline,
                    fix=self._fix(node, sites), help=f"decorate it with `@{alias}.function`",
                    note="it computes and applies gradients on every call, each op dispatched from Python; as a "
                         "tf.function it runs as one traced graph, typically several times faster")

    def _fix(self, node: cst.FunctionDef, sites: list[cst.Call]) -> FixSpec | None:
        ctx = self.ctx
        alias = ctx.names.alias_of("tensorflow")
        if alias is None or ctx.scope_of(node) is not ctx.module or not self._graph_safe(node, depth=0):
            return None
        if any(ctx.loop_values.changing_number(a.value, s) is not None for s in sites for a in s.args):
            return None
        code = ctx.module.code_for_node(node.with_changes(leading_lines=()))
        # The function's range ends with its last statement's code: drop the comments and lines after it.
        last = node.body
        while not isinstance(last, cst.SimpleStatementLine) and getattr(last, "body", None):
            last = last.body[-1] if isinstance(last.body, (list, tuple)) else last.body
        if not isinstance(last, cst.SimpleStatementLine):
            return None
        statement = ctx.module.code_for_node(last.with_changes(
            leading_lines=(), trailing_whitespace=cst.TrailingWhitespace())).rstrip("\n")
        code = code[:code.rfind(statement) + len(statement)]
        return FixSpec("safe", [Replacement(node, f"@{alias}.function\n{code}")], f"decorate with `@{alias}.function`")

    def _graph_safe(self, fn: cst.FunctionDef, depth: int) -> bool:
        """Does tracing `fn` keep what it does (see `fix_safety`)?"""
        ctx = self.ctx
        names = ctx.names
        for node in walk(fn.body):
            if isinstance(node, _UNSAFE_STATEMENTS) or isinstance(node, (cst.ClassDef, cst.Lambda)):
                return False
            if isinstance(node, (cst.Assign, cst.AnnAssign)) and any(
                    not isinstance(t, cst.Name) for t in _targets(node)):
                return False
            if isinstance(node, cst.With) and not all(
                    isinstance(i.item, cst.Call) and (names.callee(i.item) or "").startswith("tensorflow.")
                    for i in node.items):
                return False
            if not isinstance(node, cst.Call):
                continue
            func = node.func
            qualname = names.callee(node)
            if qualname is not None:
                if not qualname.startswith(("tensorflow.", "keras.")) or qualname.endswith(".Variable"):
                    return False
            elif isinstance(func, cst.Name):
                local = ctx.definitions.functions.get(func.value)
                if func.value in _PURE_BUILTINS and func.value not in names.bound_names:
                    continue
                if local:
                    if depth >= 2 or not all(self._graph_safe(f, depth + 1) for f in local):
                        return False
                elif func.value not in names.bound_names or names.is_builtin(func, func.value):
                    return False  # print, float, int, open ...: builtins that act on values or the outside
            elif not (isinstance(func, cst.Attribute) and func.attr.value in _GRAPH_METHODS):
                return False
        return True


def _targets(node: cst.Assign | cst.AnnAssign) -> list[cst.BaseExpression]:
    found: list[cst.BaseExpression] = []
    pending = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
    while pending:
        target = pending.pop()
        if isinstance(target, (cst.Tuple, cst.List)):
            pending.extend(e.value for e in target.elements)
        else:
            found.append(target)
    return found


def _in_comprehension(ctx: FileContext, node: cst.CSTNode) -> bool:
    return any(isinstance(a, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)) for a in ctx.ancestors(node))
