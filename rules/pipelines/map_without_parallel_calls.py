"""LL502 map-without-parallel-calls: the rule, its documentation and its examples."""

from __future__ import annotations

import ast

import libcst as cst

from lintloop.analysis.datasets import SOURCE_TOKENS
from lintloop.analysis.nodes import keyword_arg
from lintloop.rule import Example, FixSpec, Replacement, Rule
from lintloop.screen import CallShape, Needs


def _may_leave_out_parallel_calls(call: ast.Call) -> bool:
    """A `map` call that may leave `num_parallel_calls` out: no keyword names it, and its second argument
    is no positional one (`ds.map(fn, 4)`; with a `*args`, whose place among the keywords the tree does
    not keep, it may be)."""
    if any(keyword.arg == "num_parallel_calls" for keyword in call.keywords):
        return False
    return len(call.args) < 2 or any(isinstance(argument, ast.Starred) for argument in call.args)


# The screen's token for a unit that may hold a finding: `x.map(...)` passing no `num_parallel_calls`.
SERIAL_MAP = CallShape("serial_map", "map", _may_leave_out_parallel_calls)


class MapWithoutParallelCalls(Rule):
    code = "LL502"
    name = "map-without-parallel-calls"
    description = "`Dataset.map` without `num_parallel_calls`"
    frameworks = ("tf",)
    kind = "perf"
    fix_kind = "safe (add `num_parallel_calls=tf.data.AUTOTUNE`)"
    needs = Needs(file=(SOURCE_TOKENS,), statement=(("call:map",), (SERIAL_MAP,)))
    summary = ("`Dataset.map(fn)` without `num_parallel_calls` in a training pipeline (one consumed by `fit`, a "
               "training loop or a distribution strategy) where TensorFlow will not parallelize it by itself: "
               "`fn` (a lambda, a same-file function, or a callable instance of a same-file class — its "
               "`__call__`, less branches on a flag the instance was built with turned off —, followed into "
               "same-file helpers) is stateful — random "
               "ops (`tf.random.*`, `tf.image.random_*`, Keras random preprocessing layers), `tf.py_function`, "
               "`tf.numpy_function`, `tf.print` — or the pipeline's options turn off map parallelization "
               "(`experimental_optimization.map_parallelization` or `apply_default_optimizations` set to False).")
    why = ("A map without `num_parallel_calls` runs its function on one element at a time. TensorFlow 2.21 "
           "parallelizes such a map on its own when the function is stateless (the default "
           "`map_parallelization` optimization: measured, 2 concurrent calls and 2.2 ms/element instead of "
           "6.3), but never a stateful one: random augmentation and Python (`py_function`) decoding, the "
           "expensive maps, stay sequential. Maps of evaluation-only pipelines and maps whose function is "
           "not in this file are not flagged.")
    symptom = ("Nothing fails; training is slower. LL502_bad.py (a `tf.py_function` decode of 4 ms "
               "per example) prints `map ran one call at a time: 7.1 ms/example`; LL502_good.py runs 2 decode "
               "calls at once on 2 CPU cores (measured alone: 2.2 ms/example instead of 6.3) and does not print it.")
    remedy = "Pass `num_parallel_calls=tf.data.AUTOTUNE` to `map`."
    fix_safety = ("Safe when the function draws no random numbers: the parallel map keeps element order "
                  "(`deterministic` defaults to the dataset option, True), and its results are the same. "
                  "Unsafe when the function calls random ops: each element still gets a random transform, "
                  "but under a global seed the draws no longer go to the same elements in every run. Unsafe "
                  "too with `deterministic=False`, which then lets elements come out of order.")
    flagged = (
        Example("""
import tensorflow as tf
def augment(image, label):
    image = tf.image.random_flip_left_right(image)
    image = tf.image.random_brightness(image, 0.2)
    return image, label
train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(1000).map(augment).batch(32)
model.fit(train_ds, epochs=5)
""", expect="""
6:79-6:82 [unsafe fix] `.map(augment)` without `num_parallel_calls` runs one element at a time
    help: pass `num_parallel_calls=tf.data.AUTOTUNE`
    note: it feeds training, and its function calls the stateful `tf.image.random_flip_left_right`, so
        TensorFlow will not parallelize it by itself
""", fix_diff="""
@@ -6 +6 @@
-train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(1000).map(augment).batch(32)
+train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(1000).map(augment, num_parallel_calls=tf.data.AUTOTUNE).batch(32)
"""),
        Example("""
import tensorflow as tf
from tensorflow import keras
data_augmentation = keras.Sequential([keras.layers.RandomFlip("horizontal"), keras.layers.RandomRotation(0.1)])
train_ds = keras.utils.image_dataset_from_directory("images", batch_size=32)
train_ds = train_ds.map(lambda x, y: (data_augmentation(x), y))
model.fit(train_ds, epochs=10)
""", expect="""
5:21-5:24 [unsafe fix] `.map(lambda x, y: (data_augmentati…)` without `num_parallel_calls` runs one
    element at a time
    help: pass `num_parallel_calls=tf.data.AUTOTUNE`
    note: it feeds training, and its function calls the stateful `keras.layers.RandomFlip`, so
        TensorFlow will not parallelize it by itself
""", fix_diff="""
@@ -5 +5 @@
-train_ds = train_ds.map(lambda x, y: (data_augmentation(x), y))
+train_ds = train_ds.map(lambda x, y: (data_augmentation(x), y), num_parallel_calls=tf.data.AUTOTUNE)
"""),
        Example("""
import numpy as np
import tensorflow as tf
def load(path):
    return np.load(path.numpy().decode())
def parse(path, label):
    return tf.py_function(load, [path], tf.float32), label
def make_dataset(paths, labels):
    ds = tf.data.Dataset.from_tensor_slices((paths, labels))
    ds = ds.map(parse)
    return ds.batch(16)
def main():
    for x, y in make_dataset(paths, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
""", expect="""
9:13-9:16 [safe fix] `.map(parse)` without `num_parallel_calls` runs one element at a time
    help: pass `num_parallel_calls=tf.data.AUTOTUNE`
    note: it feeds training, and its function calls the stateful `tf.py_function`, so TensorFlow will
        not parallelize it by itself
""", fix_diff="""
@@ -9 +9 @@
-    ds = ds.map(parse)
+    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
"""),
        Example("""
import tensorflow as tf
class SpeckleNoise:
    def __init__(self, scale):
        self.scale = scale
    def __call__(self, image, label):
        return image * (1.0 + self.scale * tf.random.normal(tf.shape(image))), label
train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(SpeckleNoise(0.1)).batch(32)
model.fit(train_ds, epochs=5)
""", expect="""
7:65-7:68 [unsafe fix] `.map(SpeckleNoise(0.1))` without `num_parallel_calls` runs one element at a time
    help: pass `num_parallel_calls=tf.data.AUTOTUNE`
    note: it feeds training, and its function calls the stateful `tf.random.normal`, so TensorFlow will
        not parallelize it by itself
""", fix_diff="""
@@ -7 +7 @@
-train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(SpeckleNoise(0.1)).batch(32)
+train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(SpeckleNoise(0.1), num_parallel_calls=tf.data.AUTOTUNE).batch(32)
"""),
        Example("""
import tensorflow as tf
class RandomNoise:
    def __init__(self, stddev):
        self.stddev = stddev
    def __call__(self, image, label):
        return image + tf.random.normal(tf.shape(image), stddev=self.stddev), label
train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(RandomNoise(0.1)).batch(32)
def train(model):
    model.fit(train_ds, epochs=5)
""", expect="""
7:65-7:68 [unsafe fix] `.map(RandomNoise(0.1))` without `num_parallel_calls` runs one element at a time
    help: pass `num_parallel_calls=tf.data.AUTOTUNE`
    note: it feeds training, and its function calls the stateful `tf.random.normal`, so TensorFlow will
        not parallelize it by itself
""", fix_diff="""
@@ -7 +7 @@
-train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(RandomNoise(0.1)).batch(32)
+train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(RandomNoise(0.1), num_parallel_calls=tf.data.AUTOTUNE).batch(32)
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
def augment(image, label):
    return tf.image.random_flip_left_right(image), label
train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(augment, num_parallel_calls=tf.data.AUTOTUNE)
model.fit(train_ds.batch(32), epochs=5)
"""),
        Example("""
import tensorflow as tf
def normalize(image, label):
    return tf.cast(image, tf.float32) / 255.0, label
train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(normalize).batch(32)
model.fit(train_ds, epochs=5)
"""),
        Example("""
import tensorflow as tf
def augment(image, label):
    return tf.image.random_flip_left_right(image), label
test_ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(augment).batch(32)
model.evaluate(test_ds)
"""),
        Example("""
import tensorflow as tf
def build(files):
    return tf.data.TFRecordDataset(files).map(lambda r: tf.py_function(decode, [r], tf.float32))
"""),
        Example("""
import tensorflow as tf
class Scale:
    def __init__(self, jitter=False):
        self.jitter = jitter
    def __call__(self, image, label):
        if self.jitter:
            image = tf.image.random_saturation(image, 0.5, 1.5)
        return tf.cast(image, tf.float32) / 255.0, label
train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(Scale(jitter=False)).batch(32)
model.fit(train_ds, epochs=5)
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        datasets = self.ctx.datasets
        if not isinstance(node.func, cst.Attribute) or node.func.attr.value != "map" \
                or keyword_arg(node, "num_parallel_calls") is not None or len(node.args) >= 2 and node.args[1].keyword is None:
            return
        pipelines = datasets.through(node)
        if not any(p.training for p in pipelines):
            return
        calls = datasets.mapped_function_calls(node)
        stateful = next((s for c in calls or () if (s := datasets.stateful_call(c))), None)
        sequential = any("map_parallelization" in off or "default_optimizations" in off
                         for off in map(datasets.disabled_optimizations, pipelines))
        if stateful is None and not sequential:
            return
        reason = (f"its function calls the stateful `{stateful}`, so TensorFlow will not parallelize it by itself"
                  if stateful else "the pipeline's options turn off automatic map parallelization")
        function = f"`.map({self.ctx.snippet(node.args[0].value, 30)})`" if node.args else "`.map(...)`"
        alias = self.ctx.names.alias_of("tensorflow") or "tf"
        self.report(node.func.attr, f"{function} without `num_parallel_calls` runs one element at a time",
                    fix=self._fix(node, calls), help=f"pass `num_parallel_calls={alias}.data.AUTOTUNE`",
                    note=f"it feeds training, and {reason}")

    def _fix(self, node: cst.Call, calls: list[cst.Call] | None) -> FixSpec | None:
        alias = self.ctx.names.alias_of("tensorflow")
        if alias is None or any(arg.star for arg in node.args):
            return None
        random = any(self.ctx.datasets.random_call(c) for c in calls or ())
        deterministic = keyword_arg(node, "deterministic")
        ordered = deterministic is None or isinstance(deterministic, cst.Name) and deterministic.value == "True"
        argument = cst.Arg(keyword=cst.Name("num_parallel_calls"),
                           value=cst.parse_expression(f"{alias}.data.AUTOTUNE"),
                           equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                 whitespace_after=cst.SimpleWhitespace("")))
        args = list(node.args)
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        fixed = node.with_changes(args=[*args, argument])
        return FixSpec("safe" if ordered and not random else "unsafe",
                       [Replacement(node, self.ctx.module.code_for_node(fixed))],
                       f"add `num_parallel_calls={alias}.data.AUTOTUNE`")
