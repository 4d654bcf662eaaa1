"""What runs once per iteration (lintloop.analysis.loop_values): loops, and the functions loops call."""

import textwrap

import libcst as cst

from lintloop.analysis import FileContext
from lintloop.analysis.context import LINE_REF


def _context(source: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(source)))


def _call(ctx: FileContext, text: str) -> cst.Call:
    return next(c for c in ctx.nodes(cst.Call) if ctx.snippet(c) == text)


def _function(ctx: FileContext, name: str) -> cst.FunctionDef:
    return next(f for f in ctx.nodes(cst.FunctionDef) if f.name.value == name)


def test_a_function_every_call_of_which_is_in_a_loop_is_an_iteration_unit_through_callers():
    ctx = _context("""
        import jax
        def helper(f):
            return jax.jit(f)
        def train_step(f):
            return helper(f)(1)
        def evaluate(f):
            return f(1)
        for f in functions:
            train_step(f)
        evaluate(g)
        for f in functions:
            evaluate(f)
    """)
    values = ctx.loop_values
    assert values.iteration_unit(_call(ctx, "jax.jit(f)")) is _function(ctx, "helper")
    assert values.calling_loop(_function(ctx, "helper")) is ctx.nodes(cst.For)[0]
    assert values.iteration_unit(_call(ctx, "f(1)")) is None  # `evaluate` is also called once, outside
    assert values.inside(_function(ctx, "train_step")) == (
        "in `train_step`, which `for f in functions` calls on every iteration")
    assert values.iteration_unit(_call(ctx, "train_step(f)")) is ctx.nodes(cst.For)[0]


def test_a_traced_function_runs_once_per_trace_not_per_iteration():
    ctx = _context("""
        import jax
        import tensorflow as tf
        @jax.jit
        def jitted(x):
            return jax.grad(loss)(x)
        @tf.function
        def traced(x):
            return tf.function(g)(x)
        def eager(x):
            return jax.grad(loss)(x)
        for x in data:
            jitted(x)
            traced(x)
            eager(x)
    """)
    values = ctx.loop_values
    assert [values.iteration_unit(c) for c in (_call(ctx, "jax.grad(loss)(x)"), _call(ctx, "tf.function(g)(x)"))] \
        == [None, None]
    assert values.iteration_unit(ctx.nodes(cst.Call)[-4]) is _function(ctx, "eager")


def test_a_parameter_given_the_loop_index_by_every_call_changes_every_iteration():
    ctx = _context("""
        def train_step(step, batch):
            lr = 0.1 * 0.95 ** step
            return update(batch, lr)
        for step in range(1000):
            train_step(step, next(batches))
    """)
    values = ctx.loop_values
    lr = next(a.value for a in _call(ctx, "update(batch, lr)").args[1:])
    assert values.per_iteration_number(lr, lr) == (
        f"`lr`, computed each iteration from the parameter `step` of `train_step`, called at line {LINE_REF}0"
        f"{LINE_REF} with the loop variable `step`")
    batch = _call(ctx, "update(batch, lr)").args[0].value
    assert values.per_iteration_number(batch, batch) is None
