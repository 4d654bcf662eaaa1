"""Tracing shown on purpose (lintloop.analysis.intent): prints that announce tracing, trace counters read to
count traces; and the same answers with the screen on and off, since reads may lie in other units."""

import textwrap

import libcst as cst
import pytest

from lintloop.analysis import FileContext
from lintloop.analysis.intent import names_tracing, prose_shows
from lintloop.linter import lint_text
from lintloop.rule import RuleSet
from lintloop.rules import BY_CODE


def context(code: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(code)))


def findings(code: str, rule_code: str, screen: bool = True) -> list[tuple[int, str]]:
    result = lint_text("m.py", textwrap.dedent(code).lstrip(), RuleSet([BY_CODE[rule_code]], screen=screen))
    assert not result.errors
    return [(f.line, f.detailed) for f in result.findings if f.code == rule_code]


@pytest.mark.parametrize("text", ["Tracing with", "Traced!", "compiling step", "--- retracing ---", "JIT-compiled",
                                  "n_traces", "numTraces", "TRACE", "recompilation of f", "retraced",
                                  "追踪变量：", "跟踪： n = {}", "トレース中", "컴파일 중"])
def test_words_that_announce_tracing(text):
    assert names_tracing(text)


@pytest.mark.parametrize("text", ["Traceback", "backtrace", "tracer", "racetrack", "contraction", "compiler flags",
                                  "loss", "extracted", "step_count", "回溯", "损失"])
def test_words_that_merely_contain_the_letters(text):
    assert not names_tracing(text)


@pytest.mark.parametrize("call,expected", [
    ('print("Tracing with", x)', True),
    ('print(f"--- retracing for {n} ---")', True),
    ('print("compiling step: {}".format(x.shape))', True),
    ('print("traced %d" % n)', True),
    ('print("a" "Traced!")', True),
    ('print("loss", loss)', False),
    ('print(x, "tracer")', False),
    ('print(trace)', False),  # a name, not text
    ('print("x", sep="traced")', False),  # keyword arguments are not what is printed
])
def test_a_print_announces_tracing_by_its_literal_text(call, expected):
    ctx = context(call)
    assert ctx.intent.announces_tracing(ctx.nodes(cst.Call)[0]) is expected


# (code, flagged): LL202 decides with `counts_traces`; each case runs with the screen on and off.
_TF_COUNTERS = [
    # A nonlocal counter asserted in the test that defines the function.
    ("""
    import tensorflow as tf
    def test_traces():
        n = 0
        @tf.function
        def f(x):
            nonlocal n
            n += 1
            return x
        f(1.0)
        f(2.0)
        assert n == 1
    """, False),
    # Asserted through a test-case method, or compared with a message that says so.
    ("""
    import tensorflow as tf
    class T(tf.test.TestCase):
        def test_it(self):
            calls = 0
            @tf.function
            def f(x):
                nonlocal calls
                calls += 1
                return x
            f(1.0)
            self.assertEqual(calls, 1)
    """, False),
    ("""
    import tensorflow as tf
    count = 0
    @tf.function
    def f(x):
        global count
        count += 1
        return x
    for v in (1.0, 2.0):
        f(v)
        if count > 1:
            raise RuntimeError("f retraced")
    """, False),
    # A trace log printed at module level, in a statement of its own.
    ("""
    import tensorflow as tf
    traces = []
    @tf.function
    def f(x):
        traces.append(x)
        return x
    f(1.0)
    print(len(traces))
    """, False),
    # Printed, but neither its name nor the text says it counts traces: a step counter, a bug.
    ("""
    import tensorflow as tf
    step = 0
    @tf.function
    def f(x):
        global step
        step += 1
        return x
    f(1.0)
    print("step", step)
    """, True),
    # Read as data: a schedule's step.
    ("""
    import tensorflow as tf
    step = 0
    @tf.function
    def f(x):
        global step
        step += 1
        return x
    for x in data:
        f(x)
        if step > 100:
            lr = 0.1
    """, True),
    # Never read.
    ("""
    import tensorflow as tf
    n = 0
    @tf.function
    def f(x):
        global n
        n += 1
        return x
    """, True),
    # A local of another function, of the same name, asserted: not the counter.
    ("""
    import tensorflow as tf
    n = 0
    @tf.function
    def f(x):
        global n
        n += 1
        return x
    def other():
        n = 3
        assert n == 3
    """, True),
    # An assert in a statement of its own, with no call the screen keys on, that does not name the
    # function: the screen may leave it out, so it is not taken (the same with the screen on and off).
    ("""
    import tensorflow as tf
    n = 0
    @tf.function
    def f(x):
        global n
        n += 1
        return x
    f(1.0)
    f(2.0)
    assert n == 1
    """, True),
    # The same assert on the line that calls the function: taken.
    ("""
    import tensorflow as tf
    n = 0
    @tf.function
    def f(x):
        global n
        n += 1
        return x
    f(1.0); f(2.0); assert n == 1
    """, False),
    # A loop's condition compares data, whatever the loop's body prints.
    ("""
    import tensorflow as tf
    step = 0
    @tf.function
    def f(x):
        global step
        step += 1
        return x
    while step < 100:
        f(1.0)
        print("model compiled")
    """, True),
    # A list attribute, read by a test through another object.
    ("""
    import tensorflow as tf
    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.traced_inputs = []
        @tf.function
        def call(self, x):
            self.traced_inputs.append(x)
            return x
    class NetTest(tf.test.TestCase):
        def test_traces_once(self):
            net = Net()
            net.call(tf.ones([2]))
            net.call(tf.ones([2]))
            self.assertLen(net.traced_inputs, 1)
    """, False),
    # Called through an alias bound to the compiled function, asserted in a function that calls it.
    ("""
    import tensorflow as tf
    traced = []
    def g(x):
        traced.append(x)
        return x
    fast = tf.function(g)
    def check():
        fast(1.0)
        assert traced
    """, False),
]


@pytest.mark.parametrize("code,flagged", _TF_COUNTERS)
def test_a_trace_counter_read_to_count_traces_is_not_a_finding(code, flagged):
    on, off = findings(code, "LL202"), findings(code, "LL202", screen=False)
    assert on == off
    assert bool(on) is flagged, on


_JAX_COUNTERS = [
    ("""
    import jax
    import numpy as np
    def test_once():
        compiles = 0
        @jax.jit
        def f(x):
            nonlocal compiles
            compiles += 1
            return x
        f(1.0)
        f(2.0)
        np.testing.assert_equal(compiles, 1)
    """, False),
    ("""
    import jax
    n = 0
    @jax.jit
    def f(x):
        global n
        n = n + 1
        return x
    f(1.0)
    print("f compiled", n, "times")
    """, False),
    ("""
    import jax
    last = None
    @jax.jit
    def f(x):
        global last
        last = x
        return x
    f(1.0)
    assert last is not None
    """, True),  # a value replaced, not a count
    ("""
    import jax
    history = []
    @jax.jit
    def f(x):
        history.append(x)
        return x
    f(1.0)
    print("mean", sum(history) / len(history))
    """, True),
]


@pytest.mark.parametrize("code,flagged", _JAX_COUNTERS)
def test_a_jax_trace_counter_read_to_count_traces_is_not_a_finding(code, flagged):
    on, off = findings(code, "LL902"), findings(code, "LL902", screen=False)
    assert on == off
    assert bool(on) is flagged, on


@pytest.mark.parametrize("expr,expected", [
    ("tree_shape(params)", True),
    ("describe(params)", True),
    ("jax.tree.map(jnp.shape, params)", True),
    ("jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), params)", True),
    ("means(params)", False),
    ("jax.tree.map(lambda x: x + 1, params)", False),
    ("constant()", False),
])
def test_static_information_through_same_file_helpers_and_tree_maps(expr, expected):
    ctx = context(f"""
    import jax
    import jax.numpy as jnp
    def tree_shape(xs):
        return jax.tree.map(lambda x: x.shape, xs)
    def describe(xs):
        return tree_shape(xs)
    def means(xs):
        return jax.tree.map(lambda x: x.mean(), xs)
    def constant():
        return "shapes"
    value = {expr}
    """)
    value = ctx.nodes(cst.Assign)[-1].value
    assert ctx.jax.is_static_info(value) is expected


def test_a_changing_number_reaching_a_tf_function_through_helpers_names_the_chain():
    code = """
    import tensorflow as tf
    @tf.function
    def step(x, k):
        return x * k
    def inner(x, k):
        return step(x, k)
    def outer(x, j):
        for _ in range(3):
            x = inner(x, j)
        return x
    for epoch in range(10):
        outer(1.0, epoch)
    """
    found = findings(code, "LL205")
    assert found == findings(code, "LL205", screen=False)
    [(line, message)] = found
    assert line == 6
    assert message.startswith("`k`, a Python number changing every iteration, retraces the tf.function `step`")
    assert ("it is the parameter `k` of `inner`, called at line 9 with the parameter `j` of `outer`, "
            "called at line 12 with the loop variable `epoch`") in message


def test_a_helper_called_from_a_traced_function_is_left_to_the_outer_call():
    code = """
    import tensorflow as tf
    @tf.function
    def inner(x, k):
        return x * k
    @tf.function
    def outer(x, k):
        return inner(x, k)
    for i in range(10):
        outer(1.0, i)
    """
    assert [line for line, _ in findings(code, "LL205")] == [9]


@pytest.mark.parametrize(("prose", "shown"), [
    ("## 跟踪和多态\nPython的动态类型意味着您可以使用各种参数类型调用函数", True),
    ("如果Python参数发生变化，那么必须回溯图。", True),
    ("## Tracing\nA Python side effect runs only once.", True),
    ("## 训练模型\n我们用Adam优化器训练。", False),
    ("## Training\nWe train with Adam.", False),
])
def test_prose_that_speaks_of_tracing(prose, shown):
    assert prose_shows("tracing", prose) is shown


# (code, flagged): LL206 asks `shown_call_by_call`; each case runs with the screen on and off.
_CALL_BY_CALL = [
    # A guide: each call's result printed, one after the other.
    ("""
    import jax
    @jax.jit
    def f(x):
        print("x is", x)
        return x + 1
    print(f(1.0))
    print("again:", f(2.0))
    """, False),
    # The same through `jax.jit(g)(...)`, and a name bound to it.
    ("""
    import jax
    def g(x):
        print(x)
        return x
    print("first:", jax.jit(g)(4.0))
    step = jax.jit(g)
    print("second:", step(5.0))
    """, False),
    # One printed call is not a demonstration of what happens on the next.
    ("""
    import jax
    @jax.jit
    def f(x):
        print(x)
        return x + 1
    print(f(1.0))
    """, True),
    # A program: its step called in a loop, the results printed.
    ("""
    import jax
    @jax.jit
    def step(x):
        print(x)
        return x + 1
    for batch in batches:
        print(step(batch))
    print(step(last))
    """, True),
]


@pytest.mark.parametrize(("code", "flagged"), _CALL_BY_CALL)
@pytest.mark.parametrize("screen", [True, False])
def test_a_traced_function_shown_call_by_call(code, flagged, screen):
    assert bool(findings(code, "LL206", screen)) is flagged


@pytest.mark.parametrize("body,shows", [
    ("print(step, x.numpy(), y.numpy())", True),
    ("print(f'{step}: {x.shape}')\n    x", True),
    ("print(len(x), str(y))", True),
    ("logger.info('batch %s', x.numpy())", True),
    ("print(model(x))", False),
    ("seen.append(x)", False),
    ("y = x * 2\n    print(y)", False),
    ("if step > 3:\n        break", False),
    ("model.train_on_batch(x, y)", False),
])
def test_a_loop_that_only_shows_its_elements(body, shows):
    ctx = context(f"for step, (x, y) in enumerate(ds):\n    {body}\n")
    assert ctx.intent.only_shows(ctx.nodes(cst.For)[0]) is shows
