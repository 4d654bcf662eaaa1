"""LL503 shuffle-after-batch: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.datasets import REGROUPING, Op, Pipeline, literal_int
from lintloop.analysis.nodes import argument, keyword_arg
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


class ShuffleAfterBatch(Rule):
    code = "LL503"
    name = "shuffle-after-batch"
    description = "`shuffle` after `batch` in a tf.data pipeline"
    frameworks = ("tf",)
    probe = "effect"
    needs = Needs(file=(("call:batch", "call:padded_batch", "call:ragged_batch", "call:rebatch",
                         "name:image_dataset_from_directory", "name:text_dataset_from_directory",
                         "name:audio_dataset_from_directory", "name:make_csv_dataset", "name:load"),),
                  statement=(("call:shuffle",),))
    summary = ("In a `tf.data` pipeline (followed through chains, re-bindings, branches and same-file functions), "
               "`.shuffle(...)` whose elements are batches — it comes after `.batch(...)` (`padded_batch`, "
               "`ragged_batch`, `tfds.load(batch_size=...)`, or a Keras `*_dataset_from_directory(..., "
               "shuffle=False)`, which are already batched) with no `unbatch` in between and no batching after "
               "it and no shuffle of the examples before the batch; or `shuffle(1)`; or a literal buffer smaller than the literal size of the `.batch` that "
               "follows. Pipelines only consumed for evaluation, or only iterated to print their elements (a guide "
               "showing the order a pipeline gives), are not flagged; a helper that builds "
               "both the training and the validation dataset is judged by the call whose result is trained on.")
    why = ("`shuffle` permutes the elements it receives. After `batch` those are whole batches: each batch holds "
           "the same consecutive examples in every epoch and only the order of the batches changes, so the "
           "gradient of each step averages the same correlated examples (sorted or grouped data stays grouped). "
           "`shuffle(1)` returns the elements in their order; a buffer smaller than the batch leaves each "
           "batch mostly made of neighbouring examples.")
    symptom = ("Nothing fails; the model trains on correlated batches. LL503_bad.py (64 examples sorted "
               "by class) prints `epoch 1 batch 2 = examples 0..15 in order, classes [0]`, `epoch 2 batch 1 = "
               "examples 0..15 in order, classes [0]`: in every epoch each batch is the same 16 consecutive examples "
               "of one class; LL503_good.py prints `epoch 1 batch 0 = examples 16 from 0..63, not consecutive, "
               "classes [0, 1, 2, 3]`.")
    remedy = ("Shuffle examples before batching: `ds.shuffle(buffer).batch(n)` with a buffer of at least "
              "the batch size (ideally the dataset size). To shuffle sequences made by batching (windowing), "
              "batch again after the shuffle.")
    flagged = (
        Example("""
import tensorflow as tf
train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32).shuffle(1000)
model.fit(train_ds, epochs=10)
""", expect="""
2:77-2:84 `.shuffle(...)` after `.batch(...)` at line 2 shuffles whole batches
    help: shuffle the examples before batching: move `.shuffle(...)` ahead of `.batch(...)`
    note: each batch holds the same consecutive examples in every epoch; only the batch order changes
"""),
        Example("""
import tensorflow as tf
def make_dataset(x, y, batch_size):
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch_size)
    ds = ds.shuffle(buffer_size=100)
    return ds.prefetch(tf.data.AUTOTUNE)
""", expect="""
6:13-6:20 `.shuffle(...)` after `.batch(...)` at line 5 shuffles whole batches
    help: shuffle the examples before batching: move `.shuffle(...)` ahead of `.batch(...)`
    note: each batch holds the same consecutive examples in every epoch; only the batch order changes
"""),
        Example("""
import tensorflow as tf
from tensorflow import keras
train_ds = keras.utils.image_dataset_from_directory("data/train", batch_size=64, shuffle=False)
train_ds = train_ds.shuffle(100)
model.fit(train_ds, epochs=3)
""", expect="""
4:21-4:28 `.shuffle(...)` after the Keras dataset built unshuffled at line 3 shuffles whole batches
    help: shuffle the examples before batching
    note: each batch holds the same consecutive examples in every epoch; only the batch order changes
"""),
        Example("""
import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse).shuffle(buffer_size=8).batch(256)
ds2 = tf.data.Dataset.from_tensor_slices(paths).shuffle(1).batch(4)
""", expect="""
2:48-2:55 shuffle buffer of 8 elements is smaller than the batch of 256 at line 2
    help: use a buffer of at least the batch size (256), ideally the dataset size
    note: each batch is mostly neighbouring examples
3:49-3:56 `shuffle(1)` returns the elements in their order: nothing is shuffled
    help: give `shuffle` a buffer of at least the batch size, ideally the dataset size
"""),
        Example("""
import tensorflow as tf
def make_pipeline(texts, labels):
    ds = tf.data.Dataset.from_tensor_slices((texts, labels))
    ds = ds.batch(64).map(vectorize, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.shuffle(512).prefetch(8)
train_ds = make_pipeline(train_texts, train_labels)
val_ds = make_pipeline(val_texts, val_labels)
model.fit(train_ds, validation_data=val_ds, epochs=15)
""", expect="""
5:15-5:22 `.shuffle(...)` after `.batch(...)` at line 4 shuffles whole batches
    help: shuffle the examples before batching: move `.shuffle(...)` ahead of `.batch(...)`
    note: each batch holds the same consecutive examples in every epoch; only the batch order changes
"""),
        Example("""
import tensorflow as tf
pairs = tf.data.Dataset.from_tensor_slices((features, labels))
ds = pairs.batch(32).shuffle(100).repeat(2)
for step, (x, y) in enumerate(ds):
    print(step, x.numpy(), y.numpy())
    model.train_on_batch(x, y)
""", expect="""
3:22-3:29 `.shuffle(...)` after `.batch(...)` at line 3 shuffles whole batches
    help: shuffle the examples before batching: move `.shuffle(...)` ahead of `.batch(...)`
    note: each batch holds the same consecutive examples in every epoch; only the batch order changes
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
pairs = tf.data.Dataset.from_tensor_slices((tf.range(6), tf.range(6) * 10))
# batching first keeps the same pairs together in every epoch
ds = pairs.batch(2).shuffle(3).repeat(2)
for step, (x, y) in enumerate(ds):
    print(step, x.numpy(), y.numpy())
"""),
        Example("""
import tensorflow as tf
train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(10000).batch(32)
model.fit(train_ds, epochs=10)
"""),
        Example("""
import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse).shuffle(10000)
ds = ds.bucket_by_sequence_length(lambda x, y: tf.shape(x)[0], [16, 32, 64], [64, 32, 16, 8])
ds = ds.shuffle(100)
"""),
        Example("""
import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(records).batch(1024).map(decode_block).unbatch().shuffle(4096).batch(32)
"""),
        Example("""
import tensorflow as tf
seq_length = 100
sequences = tf.data.Dataset.from_tensor_slices(ids).batch(seq_length + 1, drop_remainder=True)
dataset = sequences.map(split_input_target)
dataset = dataset.shuffle(10000).batch(64, drop_remainder=True)
"""),
        Example("""
import tensorflow as tf
from tensorflow import keras
train_ds = keras.utils.image_dataset_from_directory("data/train", batch_size=64)
train_ds = train_ds.cache().shuffle(100)
"""),
        Example("""
import tensorflow as tf
test_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(32).shuffle(100)
model.evaluate(test_ds)
"""),
        Example("""
import tensorflow as tf
batch_size = 1
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).shuffle(100)
model.fit(ds)
"""),
        Example("""
import tensorflow as tf
def held_out(x, y):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(128).shuffle(20)
train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000).batch(128)
val_ds = held_out(x_val, y_val)
model.fit(train_ds, validation_data=val_ds, epochs=5)
model.evaluate(held_out(x_test, y_test))
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if not isinstance(node.func, cst.Attribute) or node.func.attr.value != "shuffle":
            return
        pipelines = self.ctx.datasets.through_outside_evaluation(node)
        reasons = [self._reason(p, p.index(node)) for p in pipelines]
        if reasons and all(reasons):
            headline, remedy, note = reasons[0]
            self.report(node.func.attr, headline, help=remedy, note=note)

    def _reason(self, pipeline: Pipeline, at: int) -> tuple[str, str, str] | None:
        """The finding (headline, help, note) for the shuffle at `at`, or None."""
        ops = pipeline.ops
        buffer = literal_int(argument(ops[at].call, 0, "buffer_size"))
        if buffer == 1:
            return ("`shuffle(1)` returns the elements in their order: nothing is shuffled",
                    "give `shuffle` a buffer of at least the batch size, ideally the dataset size", "")
        before = self._batched_by(ops[:at])
        after = self._next_batch(ops[at + 1:])
        if before is not None and after is None and self._batch_size(before) != 1:
            where = "the Keras dataset built unshuffled at line" if before.name == "source" else \
                f"`.{before.name}(...)` at line"
            remedy = ("shuffle the examples before batching" if before.name == "source" else
                      f"shuffle the examples before batching: move `.shuffle(...)` ahead of `.{before.name}(...)`")
            return (f"`.shuffle(...)` after {where} {self.ctx.line_of(before.call)} shuffles whole batches",
                    remedy, ("each batch holds the same consecutive examples in every epoch; only the batch "
                             "order changes"))
        size = literal_int(argument(after.call, 0, "batch_size")) if after is not None and after.call is not None else None
        if before is None and buffer is not None and size is not None and buffer < size:
            return ((f"shuffle buffer of {buffer} elements is smaller than the batch of {size} at line "
                     f"{self.ctx.line_of(after.call)}"),
                    f"use a buffer of at least the batch size ({size}), ideally the dataset size",
                    "each batch is mostly neighbouring examples")
        return None

    def _batch_size(self, batch: Op) -> int | None:
        """The literal size of a `batch(n)` (through a local name: `batch_size = 1`); batches of one
        example shuffled are examples shuffled."""
        size = argument(batch.call, 0, "batch_size") if batch.name != "source" else None
        return literal_int(self.ctx.flow.resolve_value(size)) if size is not None else None

    @staticmethod
    def _batched_by(ops: tuple[Op, ...]) -> Op | None:
        """The operation that made the elements batches of unshuffled examples, when nothing regrouped
        them since. Examples shuffled before the batch (`shuffle → batch → shuffle`, a Keras source's own
        shuffle) make a later batch shuffle a deliberate extra: batch order varies too."""
        for i in range(len(ops) - 1, -1, -1):
            op = ops[i]
            if op.name in REGROUPING:
                return None
            if op.batches:
                if op.name == "source" and not _unshuffled(op) or any(o.name == "shuffle" for o in ops[:i]):
                    return None
                return op
        return None

    @staticmethod
    def _next_batch(ops: tuple[Op, ...]) -> Op | None:
        return next((op for op in ops if op.batches), None)


def _unshuffled(source: Op) -> bool:
    """A batched source that does not shuffle its examples: `shuffle=False`, or one that does not by default
    (`tfds.load`, a Hugging Face `to_tf_dataset`, `timeseries_dataset_from_array`)."""
    shuffle = keyword_arg(source.call, "shuffle")
    if isinstance(shuffle, cst.Name) and shuffle.value in ("True", "False"):
        return shuffle.value == "False"
    return shuffle is None and (source.qualname in ("tensorflow_datasets.load", "to_tf_dataset")
                                or "timeseries" in (source.qualname or ""))
