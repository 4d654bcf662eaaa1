"""LL204 tf-function-in-loop: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.iteration import loop_header
from lintloop.analysis.loop_values import IterationUnit
from lintloop.analysis.nodes import argument, call_name, names_in, parameter_names
from lintloop.rule import HEADLINE_LIMIT, Example, Rule
from lintloop.screen import Needs


class TfFunctionInLoop(Rule):
    code = "LL204"
    name = "tf-function-in-loop"
    description = "tf.function created inside a loop (retraces every iteration)"
    shown_in_prose = "tracing"
    frameworks = ("tf",)
    kind = "perf"
    # `tf.function`, `common.function`, `from tensorflow import function` / `import GradientTape, function`:
    # not the word in prose.
    needs = Needs(file=(("name:function",), ("text:.function", "text:import function", "text:, function")),
                  statement=(("loop", "repeated"), ("name:function",)))
    probe = "trace"
    summary = ("`tf.function(...)` called, or a `@tf.function` def (any spelling or wrapper), inside a loop body "
               "(or a function the loop calls on every iteration), "
               "when the new function is run in the same iteration (`tf.function(f)(x)`, by its name, or "
               "`strategy.run(f)`, in that loop and not in a loop nested inside it): each iteration builds a "
               "new function with an empty trace cache, so every call traces (and compiles) again. Also a "
               "function rebuilt on every iteration of an outer loop though it is the same each time (it reads "
               "nothing that loop binds: an epoch loop) and run per batch in an inner loop: it traces once "
               "per epoch, the message says so. Not flagged: one function per model or configuration of a "
               "loop over them (it reads the loop's variable: each needs its own trace anyway), or a function "
               "stored for later.")
    why = ("A tf.function caches its traces on the Function object. A new object each iteration starts with "
           "no trace: the Python body is traced, the graph built and optimised (and with `jit_compile=True` "
           "compiled by XLA) on every iteration, which costs far more than running the step.")
    symptom = ("LL204_bad.py builds `tf.function(train_step)` inside its step loop and prints "
               "`20 traces for 20 calls` (the fixed program: `1 traces for 20 calls`; 9.5 s against 7.6 s "
               "for 20 steps of a tiny model); TensorFlow warns `5 out of the last 5 calls to <function "
               "train_step at 0x...> triggered tf.function retracing.`")
    remedy = ("Create the tf.function once, before the loop, and pass what changes per iteration (the batch a "
              "closure captured) as an argument: `strategy.run(fn, args=(batch,))`.")
    flagged = (
        Example("""
import tensorflow as tf
def predict(x):
    return model(x, training=False)
def serve_batch(x):
    compiled = tf.function(predict)
    return compiled(x)
for x in batches:
    outputs.append(serve_batch(x))
""", expect="""
5:16-5:36 `tf.function(...)` in `serve_batch` is rebuilt and retraced on every loop iteration
    help: create it once, before the loop, and pass what changes per iteration as an argument
    note: `serve_batch` runs on every iteration of `for x in batches` and calls the new tf.function:
        every call traces (and compiles) again
"""),
        Example("""
import tensorflow as tf
def train_step(x, y):
    return model.train_on_batch(x, y)
for x, y in dataset:
    step = tf.function(train_step)
    step(x, y)
""", expect="""
5:12-5:35 `tf.function(...)` is rebuilt and retraced on every loop iteration
    help: create it once, before the loop, and pass what changes per iteration as an argument
    note: a new tf.function is built and called in every iteration of `for x, y in dataset`: every call
        traces (and compiles) again
"""),
        Example("""
import tensorflow as tf
for epoch in range(epochs):
    for x, y in dataset:
        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        train_step(x, y)
""", expect="""
5:9-9:24 `@tf.function` def `train_step` is rebuilt and retraced on every loop iteration
    help: create it once, before the loop, and pass what changes per iteration as an argument
    note: a new tf.function is built and called in every iteration of `for x, y in dataset`: every call
        traces (and compiles) again
"""),
        Example("""
import tensorflow as tf
for i, text in enumerate(input_generator()):
    text = tf.constant(text)
    @tf.function
    def text_as_per_replica():
        ctx = tf.distribute.get_replica_context()
        return text[ctx.replica_id_in_sync_group]
    text = strategy.run(text_as_per_replica)
    outputs.append(predict_step(text))
""", expect="""
5:5-7:50 `@tf.function` def `text_as_per_replica` is rebuilt and retraced on every loop iteration
    help: create it once, before the loop, and pass what changes per iteration as an argument
    note: a new tf.function is built and called in every iteration of `for i, text in
        enumerate(input_generator())`: every call traces (and compiles) again
"""),
        Example("""
import tensorflow as tf
def evaluate(model, batches):
    for x in batches:
        yield tf.function(model.call, jit_compile=True)(x)
""", expect="""
4:15-4:56 `tf.function(...)` is rebuilt and retraced on every loop iteration
    help: create it once, before the loop, and pass what changes per iteration as an argument
    note: a new tf.function is built and called in every iteration of `for x in batches`: every call
        traces (and compiles) again
"""),
        Example("""
import tensorflow as tf
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
for epoch in range(epochs):
    step = tf.function(train_step)
    for x, y in train_ds:
        step(x, y)
""", expect="""
9:12-9:35 `tf.function(...)` is rebuilt and retraced on every iteration of `for epoch in range(epochs)`
    help: create it once, before `for epoch in range(epochs)`
    note: it is the same function each time, run in `for x, y in train_ds`: it traces (and compiles)
        again once per iteration of `for epoch in range(epochs)` — seconds for a large model, times the
        epochs
"""),
        Example("""
import tensorflow as tf
for epoch in range(num_epochs):
    @tf.function(jit_compile=True)
    def distributed_step(batch):
        return strategy.run(replica_step, args=(batch,))
    for batch in dist_dataset:
        distributed_step(batch)
""", expect="""
4:5-5:57 the tf.function `distributed_step` is rebuilt and retraced on every outer-loop iteration
    help: create it once, before `for epoch in range(num_epochs)`
    note: it is the same function each time, run in `for batch in dist_dataset`: it traces (and
        compiles) again once per iteration of `for epoch in range(num_epochs)` — seconds for a large
        model, times the epochs
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
def train_candidate(net):
    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, net(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
        return loss
    for x, y in train_ds:
        train_step(x, y)
for name, net in candidates.items():
    train_candidate(net)
"""),
        Example("""
import tensorflow as tf
for name, net in candidates.items():
    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, net(x, training=True))
        grads = tape.gradient(loss, net.trainable_variables)
        optimizers[name].apply_gradients(zip(grads, net.trainable_variables))
        return loss
    for x, y in train_ds:
        train_step(x, y)
"""),
        Example("""
import tensorflow as tf
@tf.function
def train_step(x, y):
    return loss_fn(y, model(x))
for x, y in dataset:
    train_step(x, y)
"""),
        Example("""
import tensorflow as tf
for model in models:
    step = tf.function(model.call)
    for x in batches:
        step(x)
"""),
        Example("""
import tensorflow as tf
for model in models:
    @tf.function
    def predict(x):
        return model(x)
    timings[model.name] = benchmark(predict)
"""),
        Example("""
import tensorflow as tf
compiled = {}
for name, fn in registry.items():
    compiled[name] = tf.function(fn)
"""),
    )

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if any(self.ctx.tf.function_wrapper(d.decorator) is not None for d in node.decorators):
            self._check(node, node.name.value)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.tf.wrapping(node) is None:
            return
        parent = self.ctx.parents.get(node)
        if isinstance(parent, cst.Call) and parent.func is node:  # `tf.function(f)(x)`: called at once
            self._check(node, None, called_at_once=True)
            return
        statement = self.ctx.statement_of(node)
        assign = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if isinstance(assign, cst.Assign) and assign.value is node and len(assign.targets) == 1 \
                and isinstance(assign.targets[0].target, cst.Name):
            self._check(node, assign.targets[0].target.value)

    def _check(self, node: cst.CSTNode, name: str | None, called_at_once: bool = False) -> None:
        ctx = self.ctx
        unit = ctx.loop_values.iteration_unit(node)
        if unit is None:
            return
        if isinstance(node, cst.FunctionDef):
            decorator = next(d.decorator for d in node.decorators if ctx.tf.function_wrapper(d.decorator) is not None)
            what, short = f"`@{ctx.snippet(decorator, 40)}` def `{name}`", f"the tf.function `{name}`"
        else:
            what = short = f"`{ctx.snippet(node.func, 40)}(...)`"
        runs = [c for c in ctx.definitions.calls_in(unit) if ctx.order[c] > ctx.order[node] and self._runs_through(c, name)]
        if called_at_once or any(ctx.loop_values.iteration_unit(c) is unit for c in runs):
            loop = ctx.loop_values.calling_loop(unit)
            header = f"`{loop_header(ctx, loop)}`" if loop is not None else "the loop"
            rebuilt = "is rebuilt and retraced on every loop iteration"
            if isinstance(unit, cst.FunctionDef):
                headline = _fitting(f"{what} in `{unit.name.value}` {rebuilt}", f"{what} {rebuilt}", f"{short} {rebuilt}")
                where = f"`{unit.name.value}` runs on every iteration of {header} and calls the new tf.function"
            else:
                headline = _fitting(f"{what} {rebuilt}", f"{short} {rebuilt}")
                where = f"a new tf.function is built and called in every iteration of {header}"
            self.report(node, headline,
                        help="create it once, before the loop, and pass what changes per iteration as an argument",
                        note=f"{where}: every call traces (and compiles) again")
            return
        inner = next((ctx.innermost_loop(c) for c in runs if ctx.innermost_loop(c) is not None), None)
        if inner is not None and not self._varies_with(node, unit):
            outer = loop_header(ctx, ctx.loop_values.calling_loop(unit))
            headline = _fitting(*(f"{subject} is rebuilt and retraced on every {iteration}"
                                  for iteration in (f"iteration of `{outer}`", "outer-loop iteration")
                                  for subject in (what, short)))
            self.report(node, headline, help=f"create it once, before `{outer}`",
                        note=f"it is the same function each time, run in `{loop_header(ctx, inner)}`: it traces (and "
                             f"compiles) again once per iteration of `{outer}` — seconds for a large model, times "
                             "the epochs")

    def _varies_with(self, node: cst.CSTNode, unit: IterationUnit) -> bool:
        """Is the function built at `node` a different one on each iteration of `unit`: it reads a name the
        loop binds (its target, or an assignment in its body; a function's parameters), as one step
        function per model of a loop over models does (each needs its own trace anyway)?"""
        ctx = self.ctx
        built = node if isinstance(node, cst.FunctionDef) else argument(node, 0, "func")
        if built is None:
            return True
        if isinstance(built, cst.Name):
            defined = [fn for fn in ctx.calls.local_functions(built) if ctx.is_inside(fn, unit)]
            if not defined:
                return False  # a function defined outside the loop: the same object every iteration
            built = defined[0]
        bound = names_in(unit.target) if isinstance(unit, cst.For) else set()
        if isinstance(unit, cst.FunctionDef):
            bound = parameter_names(unit)
        for target in ctx.nodes_within((cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.WithItem), unit):
            bound_expr = getattr(target, "target", None) or getattr(target, "asname", None)
            if isinstance(bound_expr, cst.AsName):
                bound_expr = bound_expr.name
            if bound_expr is not None and not ctx.is_inside(target, built):
                bound |= names_in(bound_expr)
        own = parameter_names(built) if isinstance(built, (cst.FunctionDef, cst.Lambda)) else set()
        return bool((names_in(built) - own) & bound)

    def _runs_through(self, call: cst.Call, name: str | None) -> bool:
        """Does `call` run the function named `name`, itself or through the same-file functions it calls
        (a step helper that calls it), where that name is not their own?"""
        if name is None or self._runs(call, name):
            return name is not None
        calls = self.ctx.calls
        reached = set(calls.targets(call))
        reached |= {fn for target in reached for fn in calls.called_functions(target)}
        return any(self._runs(c, name) for fn in reached if not self.ctx.bindings_in(fn, name)
                   for c in self.ctx.definitions.calls_in(fn))

    @staticmethod
    def _runs(call: cst.Call, name: str | None) -> bool:
        """Does `call` run the function named `name`: `name(...)`, or `strategy.run(name, ...)`?"""
        if isinstance(call.func, cst.Name):
            return call.func.value == name
        first = call.args[0].value if call.args and call.args[0].keyword is None else None
        return call_name(call) == "run" and isinstance(first, cst.Name) and first.value == name


def _fitting(*headlines: str) -> str:
    """The first headline that fits on a line (the last one where none does)."""
    return next((h for h in headlines if len(h) <= HEADLINE_LIMIT), headlines[-1])
