"""LL205 python-scalar-retrace: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.rule import Example, Rule
from lintloop.screen import Needs


class PythonScalarRetrace(Rule):
    code = "LL205"
    name = "python-scalar-retrace"
    frameworks = ("tf",)
    kind = "perf"
    # `tf.function` / `common.function` / `from tensorflow import function`: not the word in a docstring.
    needs = Needs(file=(("name:function",), ("text:.function", "text:import function")), statement=(("loop",),))
    probe = "trace"
    summary = ("A same-file tf.function (any spelling or wrapper) without an `input_signature`, called inside "
               "a loop with a Python number that changes every iteration as an argument: the index of "
               "`for i in range(...)` / `enumerate(...)` / `itertools.count()` of an enclosing loop, a "
               "counter `n += 1` in the loop, or simple arithmetic on one (`step + 1`).")
    why = ("A tf.function's trace is keyed on the values of its Python arguments (tensors only by dtype and "
           "shape): each new Python number traces and builds a new graph (measured, TF 2.21: 30 values, 30 "
           "traces, about +113 KiB of memory each; `reduce_retracing=True` does not help, since it relaxes "
           "shapes, not Python values).")
    symptom = ("LL205_bad.py passes the step index to its `@tf.function` train step and prints "
               "`20 traces for 20 calls` (with `tf.constant(step)`: `1 traces for 20 calls`); TensorFlow warns "
               "(only twice per function) `5 out of the last 5 calls to <function train_step at 0x...> "
               "triggered tf.function retracing.`")
    remedy = ("Pass a tensor (`tf.constant(step)`, or a `tf.Variable` the function reads), or give the "
              "tf.function an `input_signature`, which converts the number to a tensor.")
    flagged = (
        Example("""
import tensorflow as tf
@tf.function
def train_step(x, y, step):
    lr = 0.1 / (1.0 + step)
    return loss_fn(y, model(x)) * lr
for step, (x, y) in enumerate(dataset):
    train_step(x, y, step)
"""),
        Example("""
import tensorflow as tf
def run_episode(env, episode):
    return env.step(episode)
collect = tf.function(run_episode)
for episode in range(1000):
    collect(env, episode=episode)
"""),
        Example("""
import tensorflow as tf
class Trainer:
    def __init__(self):
        self.train_step = tf.function(self._train_step, jit_compile=True)
    def _train_step(self, batch, global_step):
        return batch * global_step
    def fit(self, batches):
        global_step = 0
        for batch in batches:
            global_step += 1
            self.train_step(batch, global_step)
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
@tf.function
def train_step(x, y, step):
    return loss_fn(y, model(x)) * step
for step, (x, y) in enumerate(dataset):
    train_step(x, y, tf.constant(step, tf.float32))
"""),
        Example("""
import tensorflow as tf
@tf.function
def train_step(x, y, training):
    return model(x, training=training)
for epoch in range(epochs):
    for x, y in dataset:
        train_step(x, y, True)
"""),
        Example("""
import tensorflow as tf
@tf.function(input_signature=[tf.TensorSpec([None, 4]), tf.TensorSpec([], tf.int64)])
def train_step(x, step):
    return x * tf.cast(step, tf.float32)
for step in range(100):
    train_step(batch, step)
"""),
        Example("""
import tensorflow as tf
@tf.function
def train_step(x, step):
    return x * tf.cast(step, tf.float32)
for step in tf.range(100):
    train_step(batch, step)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        tf = self.ctx.tf
        if not node.args or self.ctx.innermost_loop(node) is None:
            return
        callee = tf.compiled_callee(node)
        if callee is None or callee[1].input_signature:
            return
        for arg in node.args:
            changing = self.ctx.loop_values.changing_number(arg.value, node) if not arg.star else None
            if changing is not None:
                self.report(arg, f"{changing} is a Python number that changes every iteration, passed to "
                                 f"the tf.function `{callee[0].name.value}`: each new value traces it again "
                                 "(one graph per value); pass `tf.constant(...)` or give it an `input_signature`")
                return
