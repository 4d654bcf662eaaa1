"""The engine's shared analyses: names through every import spelling, contexts, flow, training loops."""

import textwrap

import libcst as cst
import pytest

from lintloop.analysis import FileContext
from lintloop.analysis.syntax import call_name


def context(code: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(code)))


def calls(ctx: FileContext, name: str) -> list[cst.Call]:
    return [c for c in ctx.nodes(cst.Call) if call_name(c) == name]


@pytest.mark.parametrize("code,expected", [
    ("import tensorflow as tf\ntf.argmax(x)", "tensorflow.argmax"),
    ("import tensorflow\ntensorflow.math.argmax(x)", "tensorflow.math.argmax"),
    ("from tensorflow import math as m\nm.argmax(x)", "tensorflow.math.argmax"),
    ("from tensorflow.math import argmax\nargmax(x)", "tensorflow.math.argmax"),
    ("from tensorflow.keras import losses\nlosses.MeanSquaredError()", "keras.losses.MeanSquaredError"),
    ("import tensorflow as tf\ntf.keras.losses.MeanSquaredError()", "keras.losses.MeanSquaredError"),
    ("import tf_keras\ntf_keras.losses.MeanSquaredError()", "keras.losses.MeanSquaredError"),
    ("import keras\nkeras.losses.MeanSquaredError()", "keras.losses.MeanSquaredError"),
    ("import tensorflow as tf\ntf.losses.MeanSquaredError()", "keras.losses.MeanSquaredError"),
    ("import torch.nn.functional as F\nF.mse_loss(a, b)", "torch.nn.functional.mse_loss"),
    ("import torch.nn\ntorch.nn.functional.mse_loss(a, b)", "torch.nn.functional.mse_loss"),
    ("def argmax(x):\n    return x\nargmax(x)", None),
    ("from .local import tf\ntf.argmax(x)", None),
])
def test_qualified_names_through_every_spelling(code, expected):
    ctx = context(code)
    assert ctx.names.callee(ctx.nodes(cst.Call)[-1]) == expected


def test_builtin_print_is_not_a_rebound_print():
    assert context("print(1)").names.is_builtin(cst.Name("print"), "print")
    assert not context("from rich import print\nprint(1)").names.is_builtin(cst.Name("print"), "print")
    assert not context("def print(x):\n    pass\n").names.is_builtin(cst.Name("print"), "print")


def test_contexts_tape_noop_scope_and_compiled():
    ctx = context("""
        import tensorflow as tf
        import torch
        strategy = tf.distribute.MirroredStrategy()
        def build():
            return tf.keras.Sequential()
        with strategy.scope():
            model = build()
        with tf.GradientTape() as tape:
            a = f(x)
        b = g(x)
        with torch.no_grad():
            c = h(x)
        @tf.function
        def step():
            def inner():
                return k(x)
            return inner()
    """)
    [f], [g], [h], [k], [sequential] = (calls(ctx, n) for n in ("f", "g", "h", "k", "Sequential"))
    assert [c.alias for c in ctx.tf.tapes.enclosing(f)] == ["tape"]
    assert ctx.tf.tapes.enclosing(g) == []
    assert ctx.torch.no_grad.enclosing(h) and not ctx.tf.tapes.enclosing(h)
    assert ctx.strategies.in_scope(sequential)  # built in a function only called inside the scope
    assert ctx.tf.compiled_function_of(k).name.value == "step" and ctx.tf.compiled_function_of(g) is None


def test_flows_into_follows_assignments_before_the_use():
    ctx = context("""
        with tape:
            p = model(x)
            q = np.asarray(p)
            metric = np.mean(p)
            loss = fn(y, q)
        grads = tape.gradient(loss, w)
    """)
    [asarray] = calls(ctx, "asarray")
    [mean] = calls(ctx, "mean")
    target = calls(ctx, "gradient")[0].args[0].value
    assert ctx.flow.flows_into(asarray, target) and not ctx.flow.flows_into(mean, target)


def test_training_loops_directly_and_through_a_same_file_function():
    ctx = context("""
        import tensorflow as tf
        def step(batch):
            loss = model(batch)
            loss.backward()
            optimizer.step()
        for batch in loader:
            step(batch)
        for batch in loader:
            evaluate(batch)
        for epoch in range(3):
            for x in data:
                with tf.GradientTape() as t:
                    l = model(x)
                t.gradient(l, model.trainable_variables)
    """)
    loops = ctx.nodes(cst.For)
    assert [ctx.training.is_training_loop(loop) for loop in loops] == [True, False, True, True]
