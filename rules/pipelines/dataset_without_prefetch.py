"""LL501 dataset-without-prefetch: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.datasets import SOURCE_TOKENS, Pipeline
from lintloop.rule import Example, FixSpec, Replacement, Rule, RuleOption
from lintloop.screen import Needs

_DATASET_CALLS = tuple(f"call:{m}" for m in ("batch", "padded_batch", "ragged_batch", "rebatch", "map", "repeat",
                                             "shuffle", "cache", "take", "with_options", "filter", "apply",
                                             "from_tensor_slices", "unbatch", "enumerate", "skip", "load"))


class DatasetWithoutPrefetch(Rule):
    code = "LL501"
    name = "dataset-without-prefetch"
    description = "a training tf.data pipeline without `prefetch`"
    frameworks = ("tf",)
    kind = "perf"
    fix_kind = "safe (append `.prefetch(tf.data.AUTOTUNE)`)"
    needs = Needs(file=(("call:batch", "call:padded_batch", "call:ragged_batch", "call:rebatch"), SOURCE_TOKENS),
                  statement=(_DATASET_CALLS,))
    options = {"tf_injects_prefetch": RuleOption(
        True, (True, False), "TensorFlow 2.9+ injects a prefetch after a pipeline's final synchronous "
                             "transformation: flag only pipelines whose options turn that off. Set false for "
                             "older TensorFlow to flag every such pipeline.")}
    summary = ("A `tf.data` pipeline that is batched and consumed for training (`model.fit`, a training `for` "
               "loop, `iter()` in training code, `strategy.experimental_distribute_dataset` / "
               "`distribute_datasets_from_function`) with no `.prefetch(...)` after its last `.batch(...)` on the "
               "dataset actually consumed, followed through chains, re-bindings, branches and same-file functions "
               "that build it, and whose `with_options(...)` turn off TensorFlow's automatic prefetch "
               "(`autotune.enabled`, `experimental_optimization.inject_prefetch` or "
               "`experimental_optimization.apply_default_optimizations` set to False). With the option "
               "`tf_injects_prefetch = false` (TensorFlow before 2.9): every such pipeline.")
    why = ("Without a prefetch the input pipeline and the training step run one after the other: while the model "
           "trains on a batch, nothing prepares the next. TensorFlow 2.9 and later inject a prefetch after a "
           "pipeline's last synchronous transformation by default (measured on TF 2.21: `map → shuffle → batch` "
           "ran at 40 ms/batch with or without `.prefetch`), but not when autotuning, default optimizations or "
           "the injection itself are switched off: then the two run serially (67 ms/batch).")
    symptom = ("Nothing fails; training is slower. LL501_bad.py (autotuning off, a Python generator "
               "taking 4 ms per example, 30 ms per training step) prints `input and training ran one after the "
               "other: 0 examples prepared during 20 steps, 130.8 ms/batch`; LL501_good.py, with the prefetch, "
               "prepares examples during the steps and does not print it. The same pipeline measured alone: "
               "77 ms/batch without the prefetch, 55 ms/batch with it (76 examples prepared during 15 steps).")
    remedy = "Append `.prefetch(tf.data.AUTOTUNE)` after the last `.batch(...)` of the dataset you train on."
    fix_safety = ("Safe: a prefetch buffers elements ahead in the same order; values and order are unchanged. "
                  "The fix appends it to the last operation of the consumed pipeline, and needs the file to "
                  "import tensorflow under some name.")
    flagged = (
        Example("""
import tensorflow as tf
options = tf.data.Options()
options.autotune.enabled = False
ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).batch(64).with_options(options)
model.fit(ds, epochs=10)
""", expect="""
4:73-4:85 [safe fix] batched tf.data pipeline fed to `fit` at line 5 has no `.prefetch(...)`
    help: append `.prefetch(tf.data.AUTOTUNE)` after its last batch, at the end of the pipeline
    note: its options turn off TensorFlow's automatic prefetch, so input preparation and training steps
        run one after the other
""", fix_diff="""
@@ -4 +4 @@
-ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).batch(64).with_options(options)
+ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).batch(64).with_options(options).prefetch(tf.data.AUTOTUNE)
"""),
        Example("""
import tensorflow as tf
def make_dataset(files, batch_size):
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    ds = tf.data.TFRecordDataset(files).with_options(options)
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch_size, drop_remainder=True)
    return ds
def main():
    train_ds = make_dataset(files, 128)
    for x, y in train_ds:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
""", expect="""
7:13-7:18 [safe fix] batched tf.data pipeline fed to the training loop at line 11 has no
    `.prefetch(...)`
    help: append `.prefetch(tf.data.AUTOTUNE)` after its last batch, at the end of the pipeline
    note: its options turn off TensorFlow's automatic prefetch, so input preparation and training steps
        run one after the other
""", fix_diff="""
@@ -7 +7 @@
-    ds = ds.batch(batch_size, drop_remainder=True)
+    ds = ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
"""),
        Example("""
import tensorflow as tf
opts = tf.data.Options()
opts.experimental_optimization.inject_prefetch = False
ds = tf.data.Dataset.range(1000).map(lambda i: i * 2).with_options(opts)
ds = ds.batch(32)
ds.prefetch(2)
dist_ds = strategy.experimental_distribute_dataset(ds)
""", expect="""
5:9-5:14 [safe fix] batched tf.data pipeline fed to the distribution strategy at line 7 has no
    `.prefetch(...)`
    help: append `.prefetch(tf.data.AUTOTUNE)` after its last batch, at the end of the pipeline
    note: its options turn off TensorFlow's automatic prefetch, so input preparation and training steps
        run one after the other
""", fix_diff="""
@@ -5 +5 @@
-ds = ds.batch(32)
+ds = ds.batch(32).prefetch(tf.data.AUTOTUNE)
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
options = tf.data.Options()
options.autotune.enabled = False
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).with_options(options)
ds = ds.prefetch(tf.data.AUTOTUNE)
model.fit(ds, epochs=10)
"""),
        Example("""
import tensorflow as tf
def input_fn(files, batch_size):
    options = tf.data.Options()
    options.autotune.enabled = False
    return tf.data.TFRecordDataset(files).batch(batch_size).with_options(options)
"""),
        Example("""
import tensorflow as tf
train_ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).batch(64)
model.fit(train_ds, epochs=10)
"""),
        Example("""
import tensorflow as tf
options = tf.data.Options()
options.autotune.enabled = False
test_ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).with_options(options)
model.evaluate(test_ds)
"""),
    )

    def visit_Module(self, node: cst.Module) -> None:
        by_end: dict[cst.Call, list[Pipeline]] = {}
        for pipeline in self.ctx.datasets.pipelines:
            if pipeline.training and pipeline.ops[-1].call is not None:
                by_end.setdefault(pipeline.ops[-1].call, []).append(pipeline)
        for end, pipelines in by_end.items():
            if not all(self._lacks_prefetch(p) for p in pipelines):
                continue
            pipeline = pipelines[0]
            consumer = pipeline.consumer.node
            how = "`fit`" if pipeline.consumer.kind == "fit" else "the training loop" \
                if pipeline.consumer.kind in ("for", "iter") else "the distribution strategy"
            off = self.settings["tf_injects_prefetch"]
            alias = self.ctx.names.alias_of("tensorflow") or "tf"
            self.report(end.func.attr if isinstance(end.func, cst.Attribute) else end,
                        f"batched tf.data pipeline fed to {how} at line {self.ctx.line_of(consumer)} has no "
                        "`.prefetch(...)`",
                        help=f"append `.prefetch({alias}.data.AUTOTUNE)` after its last batch, at the end of the pipeline",
                        note=("its options turn off TensorFlow's automatic prefetch, so " if off else "")
                             + "input preparation and training steps run one after the other",
                        fix=self._fix(end))

    def _lacks_prefetch(self, pipeline: Pipeline) -> bool:
        batches = [i for i, op in enumerate(pipeline.ops) if op.batches]
        if not batches or any(op.prefetches for op in pipeline.ops[batches[-1]:]):
            return False
        if any(op.name == "apply" for op in pipeline.ops[batches[-1] + 1:]):
            return False  # an `apply(f)` we cannot see may prefetch
        if not self.settings["tf_injects_prefetch"]:
            return True
        return bool(self.ctx.datasets.disabled_optimizations(pipeline)
                    & {"autotune", "default_optimizations", "inject_prefetch"})

    def _fix(self, end: cst.Call) -> FixSpec | None:
        alias = self.ctx.names.alias_of("tensorflow")
        if alias is None:
            return None
        code = self.ctx.module.code_for_node(end)
        return FixSpec("safe", [Replacement(end, f"{code}.prefetch({alias}.data.AUTOTUNE)")],
                       f"append `.prefetch({alias}.data.AUTOTUNE)`")
