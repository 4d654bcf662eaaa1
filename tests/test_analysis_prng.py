"""The PRNG key flow (lintloop.analysis.prng): which key value each draw takes, and the draws from a value
already drawn from (pairs) or from a value that does not change across a loop's iterations."""

import textwrap

import libcst as cst
import pytest

from lintloop.analysis.context import FileContext


def reuses(code: str) -> list[tuple[str, str]]:
    """(kind, draw) per reuse: kind "pair:<first draw>" or "loop" / "loop:<root>"."""
    ctx = FileContext(cst.parse_module(textwrap.dedent(code)))
    found = []
    for reuse in ctx.prng.reuses:
        if reuse.first is not None:
            kind = f"pair:{ctx.snippet(reuse.first.call, 200)}"
        else:
            kind = "loop" if reuse.root is None else f"loop:{ctx.snippet(reuse.root)}"
        found.append((kind, ctx.snippet(reuse.draw.call, 200)))
    return found


FLAGGED = {
    "while loop, key made before it": ("""
        import jax
        key = jax.random.PRNGKey(0)
        while not done:
            eps = jax.random.normal(key, (4,))
            done = step(eps)
    """, [("loop", "jax.random.normal(key, (4,))")]),
    "a split result indexed inside the loop, the key never re-bound": ("""
        import jax
        def run(key, n):
            for i in range(n):
                sub = jax.random.split(key)[1]
                x = jax.random.uniform(sub, (3,))
    """, [("loop:jax.random.split(key)", "jax.random.uniform(sub, (3,))")]),
    "split once per epoch, the epoch key used for every batch": ("""
        import jax
        def train(key, epochs, batches):
            for epoch in range(epochs):
                key, epoch_key = jax.random.split(key)
                for batch in batches:
                    mask = jax.random.bernoulli(epoch_key, 0.5, batch.shape)
    """, [("loop", "jax.random.bernoulli(epoch_key, 0.5, batch.shape)")]),
    "fold_in of the outer loop's counter, used in the inner loop": ("""
        import jax
        key = jax.random.PRNGKey(0)
        for epoch in range(3):
            epoch_key = jax.random.fold_in(key, epoch)
            for batch in batches:
                perm = jax.random.permutation(epoch_key, 10)
    """, [("loop", "jax.random.permutation(epoch_key, 10)")]),
    "a seed from a name bound outside the loop": ("""
        import jax
        def run(seed, n):
            for _ in range(n):
                key = jax.random.key(seed + 1)
                yield jax.random.normal(key, (2,))
    """, [("loop:jax.random.key(seed + 1)", "jax.random.normal(key, (2,))")]),
    "an alias of the key": ("""
        import jax
        key = jax.random.PRNGKey(0)
        noise_key = key
        a = jax.random.normal(key, (3,))
        b = jax.random.normal(noise_key, (3,))
    """, [("pair:jax.random.normal(key, (3,))", "jax.random.normal(noise_key, (3,))")]),
    "an unpacked subkey and the same index": ("""
        from jax import random
        keys = random.split(random.PRNGKey(0), 3)
        k0, k1, k2 = keys
        a = random.normal(k0, (3,))
        b = random.normal(keys[0], (3,))
    """, [("pair:random.normal(k0, (3,))", "random.normal(keys[0], (3,))")]),
    "drawn on both branches, then again": ("""
        import jax
        def f(key, flag):
            if flag:
                x = jax.random.normal(key, (3,))
            else:
                x = jax.random.uniform(key, (3,))
            return x + jax.random.gumbel(key, (3,))
    """, [("pair:jax.random.normal(key, (3,))", "jax.random.gumbel(key, (3,))")]),
    "a helper that draws from its parameter, then a draw": ("""
        import jax
        def noise(rng, shape):
            return jax.random.normal(rng, shape)
        def f(key):
            return noise(key, (3,)) + jax.random.uniform(key, (3,))
    """, [("pair:noise(key, (3,))", "jax.random.uniform(key, (3,))")]),
    "a jitted helper (jax.jit(f)) called each step with one key": ("""
        import jax
        def train_step(params, batch, rng):
            keep = jax.random.bernoulli(rng, 0.9, batch.shape)
            return params
        step = jax.jit(train_step)
        def train(params, batches):
            rng = jax.random.PRNGKey(0)
            for batch in batches:
                params = step(params, batch, rng)
    """, [("loop", "step(params, batch, rng)")]),
    "a method helper through self": ("""
        import jax
        class Trainer:
            def sample(self, key):
                return jax.random.categorical(key, self.logits)
            def run(self, key):
                for _ in range(10):
                    self.sample(key)
    """, [("loop", "self.sample(key)")]),
    "flax apply with rngs in a loop": ("""
        import jax
        dropout_rng = jax.random.PRNGKey(1)
        for batch in train_ds:
            logits = model.apply({"params": params}, batch["x"], rngs={"dropout": dropout_rng})
    """, [("loop", 'model.apply({"params": params}, batch["x"], rngs={"dropout": dropout_rng})')]),
    "flax init re-made from a constant seed in a loop": ("""
        import jax
        ensemble = []
        for i in range(5):
            ensemble.append(model.init(jax.random.PRNGKey(0), x))
    """, [("loop:jax.random.PRNGKey(0)", "model.init(jax.random.PRNGKey(0), x)")]),
    "nnx.Rngs built in a loop from one key": ("""
        import jax
        from flax import nnx
        key = jax.random.key(0)
        models = [Model(rngs=nnx.Rngs(key)) for _ in range(4)]
    """, [("loop", "nnx.Rngs(key)")]),
    "an initializer and a sampler on one key": ("""
        import jax
        init = jax.nn.initializers.glorot_normal()
        key = jax.random.PRNGKey(0)
        w = init(key, (4, 4))
        b = jax.random.normal(key, (4,))
    """, [("pair:init(key, (4, 4))", "jax.random.normal(key, (4,))")]),
    "import jax.random as jr, a draw in a with block": ("""
        import jax.random as jr
        key = jr.PRNGKey(0)
        with ctx():
            a = jr.truncated_normal(key, -2, 2, (3,))
        b = jr.normal(key, (3,))
    """, [("pair:jr.truncated_normal(key, -2, 2, (3,))", "jr.normal(key, (3,))")]),
}

NOT_FLAGGED = {
    "drawn on one path only, then again": """
        import jax
        def f(key, flag):
            if flag:
                x = jax.random.normal(key, (3,))
            return jax.random.uniform(key, (3,))
    """,
    "an early return": """
        import jax
        def f(key, flag):
            if flag:
                return jax.random.normal(key, (3,))
            return jax.random.uniform(key, (3,))
    """,
    "split each iteration of a while loop, with a continue": """
        import jax
        key = jax.random.PRNGKey(0)
        while True:
            key, sub = jax.random.split(key)
            if skip():
                continue
            x = jax.random.normal(sub, (3,))
            if done(x):
                break
    """,
    "keys in attributes, dicts and state": """
        import jax
        for batch in batches:
            a = jax.random.normal(state.key, (3,))
            b = jax.random.normal(rngs["dropout"], (3,))
            c = jax.random.normal(self.rng, (3,))
    """,
    "a helper that only splits its key": """
        import jax
        def make_keys(key):
            return jax.random.split(key, 3)
        key = jax.random.PRNGKey(0)
        keys = make_keys(key)
        x = jax.random.normal(key, (3,))
    """,
    "a helper that folds in the step": """
        import jax
        def step(state, rng):
            rng = jax.random.fold_in(rng, state.step)
            return jax.random.normal(rng, (3,))
        rng = jax.random.PRNGKey(0)
        for _ in range(10):
            state = step(state, rng)
    """,
    "a helper that splits before drawing, then a draw of the key": """
        import jax
        def get_batch(key, data):
            key, sub = jax.random.split(key)
            return jax.random.randint(sub, (8,), 0, len(data))
        key = jax.random.PRNGKey(0)
        params = model.init(key, x)
        batch = get_batch(key, data)
    """,
    "per-iteration keys: for target, index, fold_in with the loop index": """
        import jax
        key = jax.random.PRNGKey(0)
        keys = jax.random.split(key, 10)
        for k in jax.random.split(key, 10):
            a = jax.random.normal(k, (3,))
        for i in range(10):
            b = jax.random.normal(keys[i], (3,))
            c = jax.random.normal(jax.random.fold_in(key, i), (3,))
    """,
    "a comprehension over subkeys": """
        import jax
        def init(key, sizes):
            keys = jax.random.split(key, len(sizes))
            return [jax.random.normal(k, (n,)) for k, n in zip(keys, sizes)]
    """,
    "init and apply with one key (identical randomness on purpose)": """
        import haiku as hk
        import jax
        rng = jax.random.PRNGKey(42)
        params = f.init(rng, x)
        out = f.apply(params, rng, x)
        params2 = g.init(rng, x)
    """,
    "vmap over split keys": """
        import jax
        keys = jax.random.split(jax.random.PRNGKey(0), 8)
        samples = jax.vmap(lambda k: jax.random.normal(k, (3,)))(keys)
    """,
    "a key re-bound by a call the file does not define": """
        import jax
        key = jax.random.PRNGKey(0)
        for step in range(10):
            key = next_key(key)
            x = jax.random.normal(key, (3,))
    """,
    "a key re-made from the loop's seed": """
        import jax
        for seed in range(5):
            key = jax.random.PRNGKey(seed)
            x = jax.random.normal(key, (3,))
    """,
    "a loop whose body always returns": """
        import jax
        def first_noise(key, batches):
            for batch in batches:
                return batch + jax.random.normal(key, batch.shape)
    """,
    "a seed attribute assigned in the loop": """
        import jax
        for _ in range(5):
            self.seed = self.seed + 1
            x = jax.random.normal(jax.random.PRNGKey(self.seed), (3,))
    """,
}


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_flagged(name):
    code, expected = FLAGGED[name]
    assert reuses(code) == expected


@pytest.mark.parametrize("name", sorted(NOT_FLAGGED))
def test_not_flagged(name):
    assert reuses(NOT_FLAGGED[name]) == []


def test_key_values_follow_splits_and_indexes():
    code = textwrap.dedent("""
        import jax
        key = jax.random.PRNGKey(0)
        key, sub = jax.random.split(key)
        a = jax.random.normal(sub, (3,))
        keys = jax.random.split(key, 2)
        b = jax.random.normal(keys[1], (3,))
    """)
    ctx = FileContext(cst.parse_module(code))
    [flow] = [f for f in ctx.prng.flows if f.scope is ctx.module]
    by_draw = {ctx.snippet(d.call): d.values for d in flow.draws.values()}
    split_sub = by_draw["jax.random.normal(sub, (3,))"]
    indexed = by_draw["jax.random.normal(keys[1], (3,))"]
    assert len(split_sub) == 1 and len(indexed) == 1
    (sub_value,), (indexed_value,) = split_sub, indexed
    assert sub_value[1:] == (1,) and ctx.snippet(sub_value[0]) == "jax.random.split(key)"
    assert indexed_value[1:] == (1,) and ctx.snippet(indexed_value[0]) == "jax.random.split(key, 2)"


def test_the_probe_watches_the_samplers_the_analysis_knows():
    from lintloop.analysis.prng import SAMPLERS
    from lintloop.runtime_probe.bootstrap._lintloop_probe import jax_random

    assert set(jax_random.SAMPLERS) == SAMPLERS
