"""LL205 python-scalar-retrace: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.rule import Example, Rule
from lintloop.screen import Needs

# How many same-file helpers deep a parameter is followed out to the loop that passes it a changing number.
_HELPER_DEPTH = 3


class PythonScalarRetrace(Rule):
    code = "LL205"
    name = "python-scalar-retrace"
    description = "a Python scalar argument that retraces a tf.function"
    shown_in_prose = "tracing"
    frameworks = ("tf",)
    kind = "perf"
    # `tf.function` / `common.function` / `from tensorflow import function`: not the word in a docstring.
    needs = Needs(file=(("name:function",), ("text:.function", "text:import function")), statement=(("loop",),))
    probe = "trace"
    summary = ("A same-file tf.function (any spelling or wrapper) without an `input_signature`, called inside "
               "a loop with a Python number that changes every iteration as an argument: the index of "
               "`for i in range(...)` / `enumerate(...)` / `itertools.count()` of an enclosing loop, a "
               "counter `n += 1` in the loop, or simple arithmetic on one (`step + 1`); also a parameter of a "
               "same-file helper passed on to the tf.function unchanged, where a call of the helper (up to "
               f"{_HELPER_DEPTH} helpers out) passes such a number (`for i in range(64): render(i)` with `def "
               "render(i): return step(image, i)`): the message names the chain of calls.")
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
""", expect="""
7:22-7:26 `step`, a Python number changing every iteration, retraces the tf.function `train_step`
    help: pass `tf.constant(step)` or give `train_step` an `input_signature`
    note: it is the loop variable `step`: each new value traces `train_step` again, one graph per value,
        each costing a trace and memory
"""),
        Example("""
import tensorflow as tf
def run_episode(env, episode):
    return env.step(episode)
collect = tf.function(run_episode)
for episode in range(1000):
    collect(env, episode=episode)
""", expect="""
6:18-6:33 `episode`, a Python number changing every iteration, retraces the tf.function `run_episode`
    help: pass `tf.constant(episode)` or give `run_episode` an `input_signature`
    note: it is the loop variable `episode`: each new value traces `run_episode` again, one graph per
        value, each costing a trace and memory
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
""", expect="""
11:36-11:47 `global_step`, a Python number changing every iteration, retraces the tf.function
    `_train_step`
    help: pass `tf.constant(global_step)` or give `_train_step` an `input_signature`
    note: it is the counter `global_step`, incremented in the loop: each new value traces `_train_step`
        again, one graph per value, each costing a trace and memory
"""),
        Example("""
import tensorflow as tf
@tf.function
def augment(images, seed):
    return tf.image.stateless_random_flip_left_right(images, seed=[seed, 0])
def prepare(images, seed):
    return augment(images, seed)
for epoch in range(100):
    batch = prepare(images, epoch)
""", expect="""
6:28-6:32 `seed`, a Python number changing every iteration, retraces the tf.function `augment`
    help: pass `tf.constant(seed)` or give `augment` an `input_signature`
    note: it is the parameter `seed` of `prepare`, called at line 8 with the loop variable `epoch`: each
        new value traces `augment` again, one graph per value, each costing a trace and memory
"""),
        Example("""
import tensorflow as tf
class Collector:
    @tf.function
    def _rollout(self, state, episode):
        return self.policy(state) * episode
    def collect(self, state, episode, steps=10):
        for _ in range(steps):
            state = self._rollout(state, episode)
        return state
    def run(self, state):
        episode = 0
        while True:
            episode += 1
            state = self.collect(state, episode)
""", expect="""
8:42-8:49 `episode`, a Python number changing every iteration, retraces the tf.function `_rollout`
    help: pass `tf.constant(episode)` or give `_rollout` an `input_signature`
    note: it is the parameter `episode` of `collect`, called at line 14 with the counter `episode`,
        incremented in the loop: each new value traces `_rollout` again, one graph per value, each
        costing a trace and memory
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
        Example("""
import tensorflow as tf
@tf.function
def decay_step(x, step):
    return x * 0.99 ** tf.cast(step, tf.float32)
def run(x, step):
    step = tf.constant(step)
    return decay_step(x, step)
for step in range(1000):
    x = run(x, step)
"""),
        Example("""
import tensorflow as tf
@tf.function
def apply(x, scale):
    return x * scale
def forward(x, scale=2.0):
    return apply(x, scale)
for i in range(100):
    forward(batches[i])
    forward(batches[i], 0.5)
"""),
        Example("""
import tensorflow as tf
@tf.function
def shift(x, offset):
    return x + offset
def shifted(x, offset):
    return shift(x, offset)
for i in range(100):
    shifted(batches[i], tf.constant(i))
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if not node.args:
            return
        in_loop = ctx.innermost_loop(node) is not None
        if not in_loop and not any(ctx.loop_values.parameter_of(a.value, node) for a in node.args if not a.star):
            return  # neither in a loop nor passing on a parameter: cheap exit before resolving the callee
        callee = ctx.tf.compiled_callee(node)
        if callee is None or callee[1].input_signature:
            return
        for arg in node.args:
            if arg.star:
                continue
            changing = ctx.loop_values.changing_number(arg.value, node) if in_loop else None
            if changing is None:
                changing = ctx.loop_values.changing_through_callers(arg.value, node, _HELPER_DEPTH)
            if changing is not None:
                function = callee[0].name.value
                headline = (f"`{ctx.snippet(arg.value, 30)}`, a Python number changing every iteration, retraces "
                            f"the tf.function `{function}`")
                if len(headline) > 100:
                    headline = (f"`{ctx.snippet(arg.value, 20)}`, a changing Python number, retraces the tf.function "
                                f"`{function}`")
                self.report(arg, headline,
                            help=f"pass `tf.constant({ctx.snippet(arg.value, 40)})` or give `{function}` an "
                                 "`input_signature`",
                            note=f"it is {changing}: each new value traces `{function}` again, one graph per value, "
                                 "each costing a trace and memory")
                return
