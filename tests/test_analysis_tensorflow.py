"""`ctx.tf`: which functions TensorFlow traces (tf.function in every spelling, wrappers, Keras steps),
which of them XLA compiles, and code reached from them through same-file helpers."""

import textwrap

import libcst as cst
import pytest

from lintloop.analysis import FileContext


def context(code: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(code)))


def function(ctx: FileContext, name: str) -> cst.FunctionDef:
    return next(f for f in ctx.nodes(cst.FunctionDef) if f.name.value == name)


def compiled(code: str) -> dict[str, bool]:
    """name -> XLA-compiled, for every function the file traces as a tf.function."""
    ctx = context(code)
    return {fn.name.value: ctx.tf.is_xla(fn) for fn in ctx.tf.compiled_functions}


@pytest.mark.parametrize("code,expected", [
    ("import tensorflow as tf\n@tf.function\ndef step(x): return x", {"step": False}),
    ("import tensorflow as tf\n@tf.function(jit_compile=True)\ndef step(x): return x", {"step": True}),
    ("import tensorflow as tf\n@tf.function(experimental_compile=True)\ndef step(x): return x", {"step": True}),
    ("from tensorflow import function\n@function(reduce_retracing=True)\ndef step(x): return x", {"step": False}),
    ("import tensorflow as tf\ndef step(x): return x\nfast = tf.function(step, jit_compile=True)", {"step": True}),
    ("import tensorflow as tf\ndef step(x): return x\nfast = tf.function(func=step)", {"step": False}),
    ("import functools\nimport tensorflow as tf\n@functools.partial(tf.function, jit_compile=True)\n"
     "def step(x): return x", {"step": True}),
    ("import functools\nimport tensorflow as tf\nxla_function = functools.partial(tf.function, jit_compile=True)\n"
     "@xla_function\ndef step(x): return x", {"step": True}),
    ("import tensorflow as tf\nxla = tf.function(jit_compile=True)\n@xla\ndef step(x): return x", {"step": True}),
    ("import tensorflow as tf\nclass T:\n    def __init__(self):\n        self.fn = tf.function(self._step)\n"
     "    def _step(self, x): return x", {"_step": False}),
])
def test_compiled_functions_in_every_spelling(code, expected):
    assert compiled(code) == expected


def test_a_project_decorator_that_wraps_tf_function_compiles():
    # tf_agents' `common.function` shape: the decorator returns tf.function(...) of its arguments.
    code = """
        import tensorflow as tf
        def function(*args, **kwargs):
            autograph = kwargs.pop("autograph", False)
            return tf.function(*args, autograph=autograph, **kwargs)
        def xla(fn):
            return tf.function(fn, jit_compile=True)
        def traced(fn):
            def wrapper(*a):
                return fn(*a)
            return tf.function(wrapper)
        @function
        def train(x): return x
        @function(autograph=True, jit_compile=True)
        def evaluate(x): return x
        @xla
        def predict(x): return x
        @traced
        def export(x): return x
    """
    result = compiled(code)
    assert {k: result[k] for k in ("train", "evaluate", "predict")} == {"train": False, "evaluate": True, "predict": True}
    assert "export" in result and "wrapper" in result
    assert "function" not in result and "xla" not in result


@pytest.mark.parametrize("code", [
    "import tensorflow as tf\ndef deco(fn): return fn\n@deco\ndef step(x): return x",
    "import tensorflow as tf\ndef build(): return tf.function(helper)\ndef helper(x): return x\n@build\ndef step(x): return x",
    "from mylib import function\n@function\ndef step(x): return x",
    "import tensorflow as tf\nfunction = lambda f: f\n@function\ndef step(x): return x",
])
def test_decorators_that_do_not_compile(code):
    ctx = context(code)
    assert function(ctx, "step") not in ctx.tf.compiled_functions


def test_input_signature_is_recorded():
    ctx = context("""
        import tensorflow as tf
        @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
        def a(x): return x
        @tf.function
        def b(x): return x
    """)
    assert ctx.tf.compilations[function(ctx, "a")].input_signature
    assert not ctx.tf.compilations[function(ctx, "b")].input_signature


KERAS_MODEL = """
    import tensorflow as tf
    class Net(tf.keras.Model):
        def train_step(self, data):
            return {}
        def call(self, x):
            return x
    class Wrapped(Net):
        def test_step(self, data):
            return {}
    model = Net()
"""
KERAS_MODEL = textwrap.dedent(KERAS_MODEL)


def test_keras_steps_are_traced_but_not_compiled_functions():
    ctx = context(KERAS_MODEL + "model.compile(optimizer='adam', loss='mse')\n")
    steps = {fn.name.value for fn in ctx.tf.keras_steps}
    assert steps == {"train_step", "test_step"}
    assert not ctx.tf.compiled_functions
    assert not ctx.tf.xla_keras_steps  # Keras 3's default jit_compile="auto" depends on the machine


def test_keras_step_of_a_model_compiled_with_jit_compile_is_xla():
    ctx = context(KERAS_MODEL + "model.compile(optimizer='adam', loss='mse', jit_compile=True)\n")
    assert {fn.name.value for fn in ctx.tf.xla_keras_steps} == {"train_step"}


def test_run_eagerly_means_keras_steps_are_not_traced():
    ctx = context(KERAS_MODEL + "model.compile(optimizer='adam', loss='mse', run_eagerly=True)\n")
    assert not ctx.tf.keras_steps


def test_traced_chain_follows_helpers_called_only_from_traced_code():
    ctx = context("""
        import tensorflow as tf
        def inner(x):
            return tf.debugging.check_numerics(x, "x")
        def helper(x):
            return inner(x)
        @tf.function(jit_compile=True)
        def step(x):
            return helper(x)
        @tf.function
        def plain(x):
            return helper(x)
        def eager_only(x):
            return tf.debugging.check_numerics(x, "x")
        eager_only(1.0)
    """)
    checks = [c for c in ctx.nodes(cst.Call) if getattr(c.func, "attr", None) is not None
              and c.func.attr.value == "check_numerics"]
    chain, traced = ctx.tf.traced_chain(checks[0])
    assert len(chain) == 2 and traced.name.value in ("step", "plain")
    assert ctx.tf.traced_chain(checks[0], xla=True) is None  # `plain` calls it too: not only under XLA
    assert ctx.tf.traced_chain(checks[1]) is None
