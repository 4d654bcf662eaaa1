"""LL204 tf-function-in-loop: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.syntax import call_name
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


class TfFunctionInLoop(Rule):
    code = "LL204"
    name = "tf-function-in-loop"
    frameworks = ("tf",)
    kind = "perf"
    # `tf.function` / `common.function` / `from tensorflow import function`: not the word in a docstring.
    needs = Needs(file=(("name:function",), ("text:.function", "text:import function")),
                  statement=(("loop",), ("name:function",)))
    probe = "trace"
    summary = ("`tf.function(...)` called, or a `@tf.function` def (any spelling or wrapper), inside a loop body, "
               "when the new function is run in the same iteration (`tf.function(f)(x)`, by its name, or "
               "`strategy.run(f)`, in that loop and not in a loop nested inside it): each iteration builds a "
               "new function with an empty trace cache, so every call traces (and compiles) again. A "
               "function built per iteration and run many times in an inner loop (one per model of a "
               "benchmark), or stored for later, is not flagged: its trace is reused.")
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
def train_step(x, y):
    return model.train_on_batch(x, y)
for x, y in dataset:
    step = tf.function(train_step)
    step(x, y)
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
"""),
        Example("""
import tensorflow as tf
def evaluate(model, batches):
    for x in batches:
        yield tf.function(model.call, jit_compile=True)(x)
"""),
    )
    not_flagged = (
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
        loop = ctx.innermost_loop(node)
        if loop is None:
            return
        if not called_at_once and not any(
                ctx.innermost_loop(c) is loop and ctx.order[c] > ctx.order[node] and self._runs(c, name)
                for c in ctx.calls.calls_in(loop)):
            return
        if isinstance(node, cst.FunctionDef):
            decorator = next(d.decorator for d in node.decorators if ctx.tf.function_wrapper(d.decorator) is not None)
            what = f"`@{ctx.snippet(decorator)}` def `{name}`"
        else:
            what = f"`{ctx.snippet(node.func)}(...)`"
        self.report(node, f"{what} inside a loop builds a new tf.function each iteration, called in that "
                          "iteration: every call traces (and compiles) again; create it once before the loop "
                          "and pass what changes per iteration as an argument")

    @staticmethod
    def _runs(call: cst.Call, name: str | None) -> bool:
        """Does `call` run the function named `name`: `name(...)`, or `strategy.run(name, ...)`?"""
        if isinstance(call.func, cst.Name):
            return call.func.value == name
        first = call.args[0].value if call.args and call.args[0].keyword is None else None
        return call_name(call) == "run" and isinstance(first, cst.Name) and first.value == name
