"""LL504 cache-after-random-map: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.datasets import Op, Pipeline
from lintloop.rule import Example, Rule
from lintloop.screen import Needs


class CacheAfterRandomMap(Rule):
    code = "LL504"
    name = "cache-after-random-map"
    description = "`cache()` after a random `map` (the same randomness every epoch)"
    frameworks = ("tf",)
    probe = "effect"
    needs = Needs(file=(("call:map",),), statement=(("call:cache",),))
    summary = ("`.cache()` after a `.map(f)` of the same `tf.data` pipeline (followed through chains, "
               "re-bindings, branches and same-file functions) where `f` — a lambda, a same-file function, or "
               "a callable instance of a same-file class (its `__call__`, less the branches on a flag the "
               "instance was built with turned off, e.g. `if self.train:` for `train=False`), followed into "
               "same-file helpers — draws random numbers: `tf.random.*` (not the stateless ops), "
               "`tf.image.random_*`, `tf.nn.dropout`, `keras.random.*`, a `tf.random.Generator`, or a Keras random "
               "preprocessing layer (`RandomFlip`, `RandomRotation`, ..., `RandAugment`, keras_cv's; any "
               "spelling, Keras 2 and 3), called directly or through a `Sequential` of them. Pipelines only consumed for "
               "evaluation, or only iterated to print their elements, are not flagged; a helper that builds both "
               "the training and the validation dataset is judged by the call whose result is trained on.")
    why = ("`cache()` stores the elements of the first pass and replays them in every later epoch, so the random "
           "augmentation computed in epoch 1 is frozen: the model sees the same flipped/rotated/cropped copy of "
           "each example every epoch, and the augmentation no longer regularizes. Stateless random ops "
           "(`tf.image.stateless_random_*` with a fixed seed) give the same values every epoch anyway, so "
           "caching them changes nothing: they are not flagged.")
    symptom = ("Nothing fails; the augmentation stops regularizing. LL504_bad.py prints the same "
               "first batch in every epoch: `epoch 1 first batch digest 46a43f04, x[0] = -1.09893` and the same "
               "line for epochs 2 and 3; LL504_good.py, with the cache before the map, prints `c2ae6338`, "
               "`16aca2ab`, `526d3d74`.")
    remedy = ("Cache before the random map (`ds.map(decode).cache().map(augment)`), so the deterministic "
              "work is cached and the augmentation runs every epoch.")
    flagged = (
        Example("""
import tensorflow as tf
def augment(image, label):
    image = tf.image.random_flip_left_right(image)
    image = tf.image.random_crop(image, [28, 28, 3])
    return image, label
train_ds = tf.data.Dataset.from_tensor_slices((x, y)).map(augment).cache().shuffle(1000).batch(32)
""", expect="""
6:68-6:73 `.cache()` after the random `.map(...)` at line 6 freezes the augmentation after epoch 1
    help: cache before the random map: move `.cache()` ahead of the `.map(...)` at line 6
    note: the map calls `tf.image.random_flip_left_right`; `.cache()` stores its output from the first
        epoch and replays it in every later one
"""),
        Example("""
import tensorflow as tf
from tensorflow import keras
data_augmentation = keras.Sequential([keras.layers.RandomFlip("horizontal"), keras.layers.RandomZoom(0.1)])
train_ds = keras.utils.image_dataset_from_directory("images", batch_size=32)
train_ds = train_ds.map(lambda x, y: (data_augmentation(x, training=True), y), num_parallel_calls=tf.data.AUTOTUNE)
train_ds = train_ds.cache()
""", expect="""
6:21-6:26 `.cache()` after the random `.map(...)` at line 5 freezes the augmentation after epoch 1
    help: cache before the random map: move `.cache()` ahead of the `.map(...)` at line 5
    note: the map calls `keras.layers.RandomFlip`; `.cache()` stores its output from the first epoch and
        replays it in every later one
"""),
        Example("""
import tensorflow as tf
def add_noise(x, y):
    return x + tf.random.normal(tf.shape(x), stddev=0.1), y
def preprocess(x, y):
    return add_noise(tf.cast(x, tf.float32) / 255.0, y)
def make_dataset(x, y):
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(64)
    ds = ds.cache()
    return ds.prefetch(tf.data.AUTOTUNE)
""", expect="""
10:13-10:18 `.cache()` after the random `.map(...)` at line 8 freezes the augmentation after epoch 1
    help: cache before the random map: move `.cache()` ahead of the `.map(...)` at line 8
    note: the map calls `tf.random.normal`; `.cache()` stores its output from the first epoch and
        replays it in every later one
"""),
        Example("""
import tensorflow as tf
import tensorflow_datasets as tfds
class Jitter:
    def __init__(self, size, augment):
        self.size = size
        self.augment = augment
    def __call__(self, image, label):
        image = tf.image.resize(image, (self.size + 8, self.size + 8))
        if self.augment:
            image = self.crop(image)
        return image, label
    def crop(self, image):
        return tf.image.random_crop(image, (self.size, self.size, 3))
train_ds = tfds.load("cifar10", split="train", as_supervised=True)
train_ds = train_ds.map(Jitter(32, augment=True), num_parallel_calls=tf.data.AUTOTUNE).cache()
""", expect="""
15:88-15:93 `.cache()` after the random `.map(...)` at line 15 freezes the augmentation after epoch 1
    help: cache before the random map: move `.cache()` ahead of the `.map(...)` at line 15
    note: the map calls `tf.image.random_crop`; `.cache()` stores its output from the first epoch and
        replays it in every later one
"""),
        Example("""
import tensorflow as tf
def pipeline(images, labels):
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    ds = ds.map(lambda x, y: (tf.image.random_contrast(x, 0.8, 1.2), y)).cache()
    return ds.batch(32)
model.fit(pipeline(x_train, y_train), validation_data=pipeline(x_val, y_val), epochs=10)
""", expect="""
4:74-4:79 `.cache()` after the random `.map(...)` at line 4 freezes the augmentation after epoch 1
    help: cache before the random map: move `.cache()` ahead of the `.map(...)` at line 4
    note: the map calls `tf.image.random_contrast`; `.cache()` stores its output from the first epoch
        and replays it in every later one
"""),
    )
    not_flagged = (
        Example("""
import tensorflow as tf
def augment(image, label):
    return tf.image.random_flip_left_right(image), label
train_ds = tf.data.Dataset.from_tensor_slices((x, y)).map(decode).cache().map(augment).batch(32)
"""),
        Example("""
import tensorflow as tf
def augment(image, label):
    image = tf.image.stateless_random_flip_left_right(image, seed=(1, 2))
    return image, label
train_ds = tf.data.Dataset.from_tensor_slices((x, y)).map(augment).cache().batch(32)
"""),
        Example("""
import tensorflow as tf
from tensorflow.keras import layers
rescale = layers.Rescaling(1.0 / 255)
train_ds = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (rescale(a), b)).cache()
val_ds = tf.data.Dataset.from_tensor_slices((x, y)).cache().map(lambda a, b: (tf.image.random_flip_up_down(a), b))
"""),
        Example("""
import tensorflow as tf
import tensorflow_datasets as tfds
class Prepare:
    def __init__(self, training=False):
        self.training = training
    def __call__(self, image, label):
        image = tf.cast(image, tf.float32) / 255.0
        image = tf.image.random_flip_left_right(image) if self.training else image
        return image, label
test_ds = tfds.load("cifar10", split="test", as_supervised=True)
test_ds = test_ds.map(Prepare(), num_parallel_calls=tf.data.AUTOTUNE).cache().batch(256)
"""),
        Example("""
import tensorflow as tf
def noisy(x, y):
    return x + tf.random.normal(tf.shape(x), stddev=0.05), y
def held_out(x, y):
    return tf.data.Dataset.from_tensor_slices((x, y)).map(noisy).cache().batch(64)
model.evaluate(held_out(x_test, y_test))
"""),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if not isinstance(node.func, cst.Attribute) or node.func.attr.value != "cache":
            return
        pipelines = self.ctx.datasets.through_outside_evaluation(node)
        found = [self._random_map(p, p.index(node)) for p in pipelines]
        if not found or not all(found):
            return
        map_call, random = found[0]
        line = self.ctx.line_of(map_call)
        self.report(node.func.attr, f"`.cache()` after the random `.map(...)` at line {line} freezes the augmentation "
                                    "after epoch 1",
                    help=f"cache before the random map: move `.cache()` ahead of the `.map(...)` at line {line}",
                    note=f"the map calls `{random}`; `.cache()` stores its output from the first epoch and replays "
                         "it in every later one")

    def _random_map(self, pipeline: Pipeline, at: int) -> tuple[cst.Call, str] | None:
        for op in reversed(pipeline.ops[:at]):
            if op.name == "cache":
                return None  # an earlier cache: this one re-caches what is already frozen
            random = self._random_in(op)
            if random is not None:
                return op.call, random
        return None

    def _random_in(self, op: Op) -> str | None:
        if op.name != "map" or op.call is None:
            return None
        datasets = self.ctx.datasets
        return next((r for c in datasets.mapped_function_calls(op.call) or () if (r := datasets.random_call(c))), None)
