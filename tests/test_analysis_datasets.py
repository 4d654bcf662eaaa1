"""`ctx.datasets`: tf.data pipelines as ordered operations, their consumers, and what mapped functions do."""

import textwrap

import libcst as cst

from lintloop.analysis import FileContext
from lintloop.analysis.nodes import call_name


def context(code: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(code)))


def chains(ctx: FileContext) -> list[tuple[list[str], str | None, str | None, bool]]:
    """(operation names, consumer kind, consumer role, escapes) per pipeline."""
    return [([op.name for op in p.ops], p.consumer and p.consumer.kind, p.consumer and p.consumer.role, p.escapes)
            for p in ctx.datasets.pipelines]


def test_chain_rebindings_and_later_prefetch_reach_the_consumer():
    ctx = context("""
        import tensorflow as tf
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.map(parse).shuffle(100)
        ds = ds.batch(32)
        ds.prefetch(4)
        ds = ds.prefetch(tf.data.AUTOTUNE)
        model.fit(ds, epochs=3)
    """)
    found = chains(ctx)
    assert (["source", "map", "shuffle", "batch", "prefetch"], "fit", "train", False) in found
    # the discarded `ds.prefetch(4)` is a pipeline of its own, consumed nowhere we can see
    assert (["source", "map", "shuffle", "batch", "prefetch"], None, None, True) in found
    assert len(found) == 2


def test_if_branches_give_one_path_each_and_the_other_branch_is_excluded():
    ctx = context("""
        import tensorflow as tf
        def make(training):
            ds = tf.data.TFRecordDataset(files)
            if training:
                ds = ds.shuffle(1000)
            else:
                ds = ds.take(10)
            return ds.batch(8)
        def main():
            for x in make(True):
                with tf.GradientTape() as tape:
                    loss = model(x)
                opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    """)
    paths = sorted(tuple(ops) for ops, kind, role, _ in chains(ctx) if kind == "for")
    assert ("source", "shuffle", "batch") in paths and ("source", "take", "batch") in paths
    assert all(role == "train" for _, kind, role, _ in chains(ctx) if kind == "for")


def test_functions_parameters_and_distribution_consumers():
    ctx = context("""
        import tensorflow as tf
        def dataset_fn(input_context):
            return tf.data.Dataset.range(100).batch(4)
        def add_batching(ds, batch_size):
            return ds.batch(batch_size)
        def input_fn(ds: tf.data.Dataset):
            return ds.shuffle(10)
        dist = strategy.distribute_datasets_from_function(dataset_fn)
        other = strategy.experimental_distribute_dataset(add_batching(tf.data.Dataset.range(10), 2))
        it = iter(tf.data.Dataset.range(5).repeat())
        model.evaluate(tf.data.Dataset.range(3).batch(1))
    """)
    found = chains(ctx)
    assert (["source", "batch"], "distribute", "train", False) in found
    assert found.count((["source", "batch"], "distribute", "train", False)) == 2
    assert (["param", "shuffle"], None, None, True) in found  # annotated, returned, never called here
    assert (["source", "repeat"], "iter", "unknown", False) in found
    assert (["source", "batch"], "evaluate", "eval", False) in found


def test_batched_sources_and_tuple_unpacked_tfds_splits():
    ctx = context("""
        import tensorflow as tf
        import tensorflow_datasets as tfds
        from tensorflow import keras
        train_ds = keras.utils.image_dataset_from_directory("d", batch_size=32)
        raw = keras.utils.image_dataset_from_directory("d", batch_size=None)
        ds_train, ds_test = tfds.load("mnist", split=["train", "test"], as_supervised=True)
        model.fit(train_ds)
        model.fit(raw)
        model.fit(ds_train.batch(8))
    """)
    fits = [p for p in ctx.datasets.pipelines if p.consumer is not None]
    batched = {(p.ops[0].qualname, p.ops[0].batches, p.ops[0].prefetches) for p in fits}
    assert ("keras.utils.image_dataset_from_directory", True, True) in batched
    assert ("keras.utils.image_dataset_from_directory", False, False) in batched
    assert [op.name for op in fits[-1].ops] == ["source", "batch"] and fits[-1].ops[0].qualname == "tensorflow_datasets.load"


def test_unknown_roots_are_not_datasets_without_tf_data_evidence():
    ctx = context("""
        import tensorflow as tf
        def f(records):
            return records.batch(8).shuffle(10)
        def g(records):
            return records.map(decode, num_parallel_calls=tf.data.AUTOTUNE).batch(8)
    """)
    assert chains(ctx) == [(["unknown", "map", "batch"], None, None, True)]


def test_options_that_turn_off_default_optimizations():
    ctx = context("""
        import tensorflow as tf
        options = tf.data.Options()
        options.autotune.enabled = False
        options.experimental_optimization.map_parallelization = False
        options.experimental_optimization.inject_prefetch = True
        ds = tf.data.Dataset.range(8).with_options(options).batch(2)
        model.fit(ds)
    """)
    [pipeline] = ctx.datasets.pipelines
    assert ctx.datasets.disabled_optimizations(pipeline) == {"autotune", "map_parallelization"}


def test_random_and_stateful_mapped_functions():
    ctx = context("""
        import tensorflow as tf
        from tensorflow import keras
        augment = keras.Sequential([keras.layers.RandomFlip("horizontal")])
        def noise(x):
            return x + tf.random.normal(tf.shape(x))
        def through_helper(x, y):
            return noise(x), y
        def fixed(x):
            return tf.image.stateless_random_flip_left_right(x, seed=(1, 2))
        def decode(x):
            return tf.numpy_function(read, [x], tf.float32, stateful=False)
        ds = tf.data.Dataset.range(4)
        a = ds.map(through_helper)
        b = ds.map(lambda x, y: (augment(x), y))
        c = ds.map(fixed)
        d = ds.map(decode)
        e = ds.map(lambda x: augment(x, training=False))
        f = ds.map(tf.py_function(read, [ds], tf.float32))
    """)
    datasets = ctx.datasets
    maps = [c for c in ctx.nodes(cst.Call) if call_name(c) == "map"]
    maps.sort(key=lambda c: ctx.order[c])

    def first(kind, call):
        return next((r for c in datasets.mapped_function_calls(call) or () if (r := kind(c))), None)

    assert [first(datasets.random_call, m) for m in maps[:5]] == [
        "tf.random.normal", "keras.layers.RandomFlip", None, None, None]
    assert first(datasets.stateful_call, maps[3]) is None  # numpy_function(stateful=False)
    assert datasets.mapped_function_calls(maps[5]) is None  # not a function of this file


def test_same_named_nested_functions_of_two_methods_stay_apart():
    ctx = context("""
        import tensorflow as tf
        class Test:
            def test_a(self):
                def input_fn():
                    return tf.data.Dataset.range(8).batch(2)
                model.fit(input_fn())
            def test_b(self):
                def input_fn():
                    return tf.data.Dataset.range(8).shuffle(8).batch(4)
                model.fit(input_fn())
    """)
    assert sorted(ops for ops, kind, _, _ in chains(ctx) if kind == "fit") == [
        ["source", "batch"], ["source", "shuffle", "batch"]]
