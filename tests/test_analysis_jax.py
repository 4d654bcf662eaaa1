"""The JAX analysis: which functions JAX traces, with which transform and static arguments."""

import textwrap

import libcst as cst
import pytest

from lintloop.analysis.context import FileContext


def context(code: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(code)))


def compiled(code: str) -> dict[str, tuple[str, tuple[int, ...], tuple[str, ...]]]:
    ctx = context(code)
    return {_name(fn): (t.kind, t.static_argnums, t.static_argnames) for fn, t in ctx.jax.compiled_functions.items()}


def _name(fn: cst.CSTNode) -> str:
    return fn.name.value if isinstance(fn, cst.FunctionDef) else "<lambda>"


@pytest.mark.parametrize("code, expected", [
    ("import jax\n@jax.jit\ndef step(x): return x", {"step": ("jit", (), ())}),
    ("from jax import jit\n@jit\ndef step(x): return x", {"step": ("jit", (), ())}),
    ("import jax\nfrom functools import partial\n@partial(jax.jit, static_argnums=(1,), donate_argnums=0)\n"
     "def step(x, n): return x", {"step": ("jit", (1,), ())}),
    ("import functools, jax\n@functools.partial(jax.jit, static_argnames='train')\ndef step(x, train): return x",
     {"step": ("jit", (), ("train",))}),
    ("import jax\n@jax.jit(static_argnames=('n', 'm'))\ndef step(x, n, m): return x",
     {"step": ("jit", (), ("n", "m"))}),
    ("import jax\ndef step(x, n): return x\nfast = jax.jit(step, static_argnums=1)", {"step": ("jit", (1,), ())}),
    ("import jax\ndef train_step(x): return x\ntrain_step = jax.jit(train_step)", {"train_step": ("jit", (), ())}),
    ("import jax\ndef loss(p, x): return x\ngrad_fn = jax.jit(jax.grad(loss))", {"loss": ("jit", (), ())}),
    ("import jax\nfrom functools import partial\ndef step(model, x): return x\n"
     "fast = jax.jit(partial(step, model))", {"step": ("jit", (), ())}),
    ("import jax\nfrom functools import partial\ndef step(x, n): return x\n"
     "fast = partial(jax.jit, static_argnums=1)(step)", {"step": ("jit", (1,), ())}),
    ("import jax\nfrom functools import partial\njit_step = partial(jax.jit, donate_argnums=0)\n"
     "@jit_step\ndef step(x): return x", {"step": ("jit", (), ())}),
    ("import jax\n@jax.pmap\ndef step(x): return x", {"step": ("pmap", (), ())}),
    ("import jax\nfrom functools import partial\n@partial(jax.pmap, axis_name='b', static_broadcasted_argnums=(2,))\n"
     "def step(x, y, n): return x", {"step": ("pmap", (2,), ())}),
    ("from jax.experimental.pjit import pjit\ndef step(x): return x\nfast = pjit(step)", {"step": ("pjit", (), ())}),
    ("from flax import nnx\n@nnx.jit\ndef step(model, x): return x", {"step": ("nnx.jit", (), ())}),
    ("from flax import nnx\n@nnx.jit(static_argnums=2)\ndef step(model, x, n): return x",
     {"step": ("nnx.jit", (2,), ())}),
    ("from flax import nnx\n@nnx.scan(in_axes=(nnx.Carry, 0))\ndef step(c, x): return c, x",
     {"step": ("nnx.scan", (), ())}),
    ("import jax\nclass T:\n    def __init__(self):\n        self.step = jax.jit(self._step)\n"
     "    def _step(self, x): return x", {"_step": ("jit", (), ())}),
    ("import jax\nfast = jax.jit(lambda x: x * 2)", {"<lambda>": ("jit", (), ())}),
    ("import jax\ndef make_step(model):\n    def step(x): return model(x)\n    return step\n"
     "fast = jax.jit(make_step(net))", {"step": ("jit", (), ())}),
    # Not compiled: grad / vmap alone run the function on every call; a user's own `jit`.
    ("import jax\ndef loss(p, x): return x\ng = jax.grad(loss)\nv = jax.vmap(loss)", {}),
    ("def jit(f): return f\n@jit\ndef step(x): return x", {}),
    ("import numba\n@numba.jit\ndef step(x): return x", {}),
    # Calling a compiled function is not compiling its argument.
    ("import jax\ndef step(x): return x\ndef f(x): return x\ny = jax.jit(step)(f)", {"step": ("jit", (), ())}),
])
def test_compiled_functions_in_every_spelling(code, expected):
    assert compiled(code) == expected


@pytest.mark.parametrize("code, bodies", [
    ("import jax\ndef body(c, x): return c, x\njax.lax.scan(body, 0, xs)", {"body": "scan"}),
    ("from jax import lax\ndef body(i, c): return c\nlax.fori_loop(0, 10, body, 0)", {"body": "fori_loop"}),
    ("import jax.lax as L\ndef cond(c): return c < 3\ndef body(c): return c + 1\nL.while_loop(cond, body, 0)",
     {"cond": "while_loop", "body": "while_loop"}),
    ("import jax\ndef yes(x): return x\ndef no(x): return -x\njax.lax.cond(p, yes, no, 1.0)",
     {"yes": "cond", "no": "cond"}),
    ("import jax\ndef a(x): return x\ndef b(x): return -x\njax.lax.switch(i, [a, b], 1.0)",
     {"a": "switch", "b": "switch"}),
    ("import jax\njax.lax.scan(lambda c, x: (c, x), 0, xs)", {"<lambda>": "scan"}),
    ("from flax import nnx\ndef body(i, c): return c\nnnx.fori_loop(0, 3, body, 0)", {"body": "nnx.fori_loop"}),
])
def test_loop_and_branch_bodies_are_traced_without_jit(code, bodies):
    ctx = context(code)
    found = {_name(fn): t.kind for fn, t in ctx.jax.traced_bodies.items()}
    assert found == bodies
    assert not ctx.jax.compiled_functions


def _call(ctx: FileContext, text: str) -> cst.Call:
    return next(c for c in ctx.nodes(cst.Call) if ctx.snippet(c) == text)


def test_compiled_callee_finds_the_wrapped_def_and_its_static_args():
    ctx = context("""
        import jax
        from functools import partial
        @partial(jax.jit, static_argnums=2)
        def step(p, x, n): return x
        def loss(p, x): return x
        fast = jax.jit(loss, static_argnames="x")
        other = jax.jit(imported_fn)
        class T:
            def __init__(self):
                self.update = jax.jit(self._update)
            def _update(self, s): return s
            def run(self, s):
                return self.update(s)
        step(p, x, 3)
        fast(p, x)
        other(p)
        jax.jit(loss)(p, x)
        loss(p, x)
    """)
    jax_ = ctx.jax
    fn, transform = jax_.compiled_callee(_call(ctx, "step(p, x, 3)"))
    assert fn.name.value == "step" and transform.static_argnums == (2,)
    fn, transform = jax_.compiled_callee(_call(ctx, "fast(p, x)"))
    assert fn.name.value == "loss" and transform.static_argnames == ("x",)
    fn, transform = jax_.compiled_callee(_call(ctx, "other(p)"))
    assert fn is None and transform.kind == "jit"
    fn, _ = jax_.compiled_callee(_call(ctx, "jax.jit(loss)(p, x)"))
    assert fn.name.value == "loss"
    fn, _ = jax_.compiled_callee(_call(ctx, "self.update(s)"))
    assert fn.name.value == "_update"
    # `loss` itself is the Python function: calling it runs eagerly.
    assert jax_.compiled_callee(_call(ctx, "loss(p, x)")) is None


def test_traced_chain_follows_helpers_called_only_from_traced_code():
    ctx = context("""
        import jax
        def log(v):
            print(v)
        def shared(v):
            print(v)
        @jax.jit
        def step(x):
            log(x)
            shared(x)
            return x
        shared(1)
        def body(c, x):
            def inner(y):
                print(y)
            inner(x)
            return c, x
        jax.lax.scan(body, 0, xs)
        def host(v):
            print(v)
        @jax.jit
        def g(x):
            jax.debug.callback(host, x)
            return x
    """)
    prints = [c for c in ctx.nodes(cst.Call) if ctx.snippet(c) in ("print(v)", "print(y)")]
    chains = {ctx.scope_of(p).name.value: ctx.jax.traced_chain(p) for p in prints}
    chain, fn = chains["log"]
    assert [ctx.snippet(c) for c in chain] == ["log(x)"] and fn.name.value == "step"
    assert chains["shared"] is None  # also called eagerly
    assert chains["inner"] == ((), next(f for f in ctx.nodes(cst.FunctionDef) if f.name.value == "body"))
    assert chains["host"] is None  # a host callback runs on values


def test_a_def_decorated_through_a_named_partial_is_called_compiled():
    ctx = context("""
        import jax
        from functools import partial
        jit_step = partial(jax.jit, static_argnames="n")
        @jit_step
        def step(x, n): return x
        step(x, 3)
    """)
    fn, transform = ctx.jax.compiled_callee(_call(ctx, "step(x, 3)"))
    assert fn.name.value == "step" and transform.static_argnames == ("n",)
    assert isinstance(transform.site, cst.Name)  # the decorator that applied it


def test_a_compile_chosen_by_a_conditional_expression():
    found = compiled("""
import jax
from flax import nnx
def nnx_step(model, batch, pad_id): return batch
def jax_step(state, batch, pad_id): return batch
jit_fn = nnx.jit if use_nnx else jax.jit
train = jit_fn(nnx_step if use_nnx else jax_step, static_argnames=("pad_id",))
""")
    assert found == {"nnx_step": ("nnx.jit", (), ("pad_id",)), "jax_step": ("nnx.jit", (), ("pad_id",))}


def test_self_method_wrapped_is_the_method_of_the_same_class():
    ctx = context("""
        import jax
        class Trainer:
            def __init__(self):
                self.step = jax.jit(self._step)
            def _step(self, x): return x
        class Evaluator:
            def _step(self, x): return x
    """)
    [fn] = ctx.jax.compiled_functions
    assert next(a for a in ctx.ancestors(fn) if isinstance(a, cst.ClassDef)).name.value == "Trainer"
