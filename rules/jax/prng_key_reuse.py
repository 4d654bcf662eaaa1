"""LL901 prng-key-reuse: the rule, its documentation and its examples."""

from __future__ import annotations

import libcst as cst

from lintloop.analysis.prng import DRAW_CALL_NAMES, KEY_CALL_NAMES, KEY_MAKERS, KEY_PARAMETER_NAMES, Reuse
from lintloop.rule import HEADLINE_LIMIT, Example, Rule
from lintloop.screen import Needs

_SAME_PREFIX = ("(with jax 0.10 even draws of different shapes share their leading numbers)")


class PrngKeyReuse(Rule):
    code = "LL901"
    name = "prng-key-reuse"
    description = "a JAX PRNG key used twice (the same random numbers)"
    shown_in_prose = "keys"
    frameworks = ("jax",)
    kind = "bug"
    # A JAX file that makes or splits keys (`jax.random`, `from jax import random`, `import jax.random
    # as jr`, `nnx.Rngs`, `hk.PRNGSequence`), and a unit that draws directly, or makes, splits or takes a
    # key it may hand to a helper that draws (a parameter by its usual names).
    needs = Needs(file=(("name:jax", "name:flax"), ("name:random", "name:Rngs", "name:PRNGSequence")),
                  statement=((*(f"call:{name}" for name in (*DRAW_CALL_NAMES, *KEY_CALL_NAMES)),
                              *(f"name:{name}" for name in KEY_PARAMETER_NAMES)),))
    probe = "effect"
    summary = ("One PRNG key value drawn from twice: passed to two `jax.random` sampling calls (`normal`, "
               "`uniform`, `bernoulli`, `categorical`, `permutation`, ... any spelling), as `rngs=` to flax "
               "`apply`, to `init` / haiku `apply(params, rng, ...)`, `nnx.Rngs(key)`, `hk.PRNGSequence(key)`, "
               "a `jax.nn.initializers` initializer, or a same-file helper (jitted or not) that draws from its "
               "key parameter — on every path, with no `split`/`fold_in` re-binding it between; or drawn from "
               "inside a loop (or a step function the loop calls every iteration) though it is the same on "
               "every iteration: made before the loop and never re-bound in it, re-made from a constant seed in "
               "it, or split / folded from such a key with loop-invariant data (`_, sub = jax.random.split(key)` "
               "without re-binding `key`). Keys followed through assignments, unpacking, constant indexes "
               "(`keys[0]`), branches and loops, and a key that a module variable, an enclosing function's "
               "variable or `self.key` is bound to once in the file; other keys kept in attributes, dicts or "
               "state (`self.rng`, `state.key`), and keys passed to functions of other files, are not judged. In pairs, `init` calls (flax, haiku), `nnx.Rngs` and haiku's "
               "`apply(params, rng)` are not counted (one key for `init` and `apply`, or for two `init`s, "
               "gives identical parameters on purpose); in loops they are. Also a key made as a parameter's "
               "default value (`def dropout(x, key=jax.random.PRNGKey(0))`, or made by any call: `key=get_key()`) of a function that draws from it, "
               "called without it where the call runs more than once (in a loop, in a function called from "
               "one, or from two places): the default is evaluated once, when the `def` runs. Not a key "
               "reused on purpose: draws shown as bare expressions (a notebook demonstrating that one key "
               "gives the same numbers), draws whose results are then compared (`assert (a == b).all()`, "
               "`np.testing.assert_allclose(a, b)`), fake inputs whose numbers nothing depends on (a draw only "
               "compiled or timed, `jax.jit(f).lower(x)`, `f(x).block_until_ready()`); nor flax `apply(rngs=...)` of two different modules "
               "(flax folds each module's path into its keys) or an initialising `apply(mutable=[\"params\"])`.")
    why = ("A JAX key is a value, not a stateful generator: a sampler returns the same numbers every time it "
           "is given the same key. Two draws from one key are identical (or, for different distributions, "
           "derived from the same bits: correlated), and with jax 0.10's default `threefry_partitionable` "
           "draws of different shapes from one key share their leading numbers. In a loop, a key that never "
           "changes gives every step the same dropout mask, noise or data order.")
    symptom = ("LL901_bad.py draws its dropout mask every step from one key made before the "
               "loop and prints `20/20 steps drew the same dropout mask as step 1; 1 distinct masks` (the fixed "
               "program, which splits the key each step: `1/20 ...; 20 distinct masks`). "
               "LL901_twodraws_bad.py draws its inputs and their label noise from one key and "
               "prints `corr(x, noise) = 1.000` and `fitted w = 2.500 (true 2.0)` (fixed: `0.045`, `2.021`). "
               "Measured, jax 0.10.2: `normal(key, (3,))` and `normal(key, (5,))` start with the same three "
               "numbers. The probe (`lintloop check --probe`) reports `one PRNG key drawn from 20 times, by "
               "`bernoulli` at LL901_bad.py:35 (20x): 19 of 19 later draws identical to the first`.")
    remedy = ("Split before each draw and keep the new key: `key, sub = jax.random.split(key)` then "
              "`jax.random.normal(sub, ...)`; for several draws, `k1, k2 = jax.random.split(key)`. In a "
              "step function, `jax.random.fold_in(key, step)` gives a different key per step.")
    flagged = (
        Example("""
import jax
import jax.numpy as jnp
from utils import new_key
def add_noise(x, scale, key=new_key()):
    return x + scale * jax.random.normal(key, x.shape)
for step, (x, y) in enumerate(batches):
    params, opt_state = update(params, opt_state, add_noise(x, 0.1), y)
""", expect="""
4:29-4:38 default key `key=new_key()` of `add_noise` is made once and reused by calls that omit it
    help: make `key` a required parameter and pass each call a fresh key (`key, sub =
        jax.random.split(key)`)
    note: the default is evaluated once, when `def add_noise` runs, and `jax.random.normal` at line 5
        draws from it: every call that leaves `key` out (as at line 7, which runs more than once) draws
        the same random numbers
"""),
        Example("""
import jax
class Trainer:
    def __init__(self):
        self.key = jax.random.PRNGKey(0)
    def fit(self, params, batches):
        for batch in batches:
            mask = jax.random.bernoulli(self.key, 0.9, batch.shape)
            params = update(params, batch * mask)
        return params
""", expect="""
7:20-7:68 PRNG key `self.key` is the same on every iteration of the loop at line 6
    help: split it per iteration (`key, sub = jax.random.split(key)` and draw from `sub`) or use
        `jax.random.fold_in(key, step)`
    note: it is made before the loop and never re-bound in it: `jax.random.bernoulli` draws the same
        random numbers on every iteration
"""),
        Example("""
import jax
key = jax.random.PRNGKey(0)
def train_step(params, batch):
    mask = jax.random.bernoulli(key, 0.9, batch.shape)
    return update(params, batch * mask)
for batch in batches:
    params = train_step(params, batch)
""", expect="""
4:12-4:55 PRNG key `key` is the same on every iteration of the loop at line 6
    help: split it per iteration (`key, sub = jax.random.split(key)` and draw from `sub`) or use
        `jax.random.fold_in(key, step)`
    note: it is made before the loop and never re-bound in it: `jax.random.bernoulli` draws the same
        random numbers on every iteration
"""),
        Example("""
import jax
import jax.numpy as jnp
def loss_fn(params, x, y, dropout_key):
    keep = jax.random.bernoulli(dropout_key, 0.9, x.shape)
    return jnp.mean(((x * keep) @ params - y) ** 2)
@jax.jit
def train_step(params, x, y, dropout_key):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y, dropout_key)
    return params - 0.1 * grads, loss
def train(params, batches):
    dropout_key = jax.random.PRNGKey(1)
    for x, y in batches:
        params, loss = train_step(params, x, y, dropout_key)
""", expect="""
13:24-13:61 PRNG key `dropout_key` is the same on every iteration of the loop at line 12
    help: split it per iteration (`key, sub = jax.random.split(key)` and draw from `sub`) or use
        `jax.random.fold_in(key, step)`
    note: it is made before the loop and never re-bound in it: `train_step` (which draws from it with
        `loss_fn` (which draws from it with `jax.random.bernoulli` at line 4) at line 8) draws the same
        random numbers on every iteration
"""),
        Example("""
import jax
import jax.numpy as jnp
key = jax.random.PRNGKey(0)
for step in range(num_steps):
    mask = jax.random.bernoulli(key, 0.9, (batch_size, hidden))
    params, opt_state, loss = train_step(params, opt_state, batch, mask)
""", expect="""
5:12-5:64 PRNG key `key` is the same on every iteration of the loop at line 4
    help: split it per iteration (`key, sub = jax.random.split(key)` and draw from `sub`) or use
        `jax.random.fold_in(key, step)`
    note: it is made before the loop and never re-bound in it: `jax.random.bernoulli` draws the same
        random numbers on every iteration
"""),
        Example("""
from jax import random
key = random.PRNGKey(42)
X = random.normal(key, (n_samples, n_features))
noise = 0.1 * random.normal(key, (n_samples,))
y = X @ true_w + noise
""", expect="""
4:15-4:47 PRNG key `key` already drawn from at line 3, with no `split`/`fold_in` between
    help: split the key and give each draw its own subkey (`k1, k2 = jax.random.split(key)`)
    note: `jax.random.normal` here draws the same random numbers as `jax.random.normal` at line 3 (with
        jax 0.10 even draws of different shapes share their leading numbers)
"""),
        Example("""
import jax
@jax.jit
def train_step(state, batch, dropout_rng):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["x"], train=True, rngs={"dropout": dropout_rng})
        return cross_entropy(logits, batch["y"])
    grads = jax.grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads)

def train(state, batches, seed):
    rng = jax.random.PRNGKey(seed)
    for batch in batches:
        state = train_step(state, batch, rng)
    return state
""", expect="""
13:17-13:46 PRNG key `rng` is the same on every iteration of the loop at line 12
    help: split it per iteration (`key, sub = jax.random.split(key)` and draw from `sub`) or use
        `jax.random.fold_in(key, step)`
    note: it is made before the loop and never re-bound in it: `train_step` (which draws from it with
        `state.apply_fn(rngs=...)` at line 5) draws the same random numbers on every iteration
"""),
        Example("""
import jax.random as jr
key = jr.PRNGKey(0)
for epoch in range(epochs):
    _, perm_key = jr.split(key)
    order = jr.permutation(perm_key, n_train)
    run_epoch(order)
""", expect="""
5:13-5:46 PRNG key `perm_key` is the same on every iteration of the loop at line 3
    help: split it per iteration (`key, sub = jax.random.split(key)` and draw from `sub`) or use
        `jax.random.fold_in(key, step)`
    note: it comes from `jr.split(key)` at line 4, which derives the same keys on every iteration (the
        key it splits is never re-bound in the loop): `jax.random.permutation` draws the same random
        numbers on every iteration
"""),
        Example("""
import jax
keys = jax.random.split(jax.random.PRNGKey(0), 3)
w1 = jax.random.normal(keys[0], (784, 512)) * 0.01
w2 = jax.random.normal(keys[0], (512, 10)) * 0.01
""", expect="""
4:6-4:43 PRNG key `keys[0]` already drawn from at line 3, with no `split`/`fold_in` between
    help: split the key and give each draw its own subkey (`k1, k2 = jax.random.split(key)`)
    note: `jax.random.normal` here draws the same random numbers as `jax.random.normal` at line 3 (with
        jax 0.10 even draws of different shapes share their leading numbers)
"""),
        Example("""
import jax
def init_mlp(key, sizes):
    return [(jax.random.normal(key, (m, n)) * 0.01, jnp.zeros(n)) for m, n in zip(sizes[:-1], sizes[1:])]
""", expect="""
3:14-3:44 PRNG key `key` is the same on every iteration of the comprehension at line 3
    help: split it per iteration (`key, sub = jax.random.split(key)` and draw from `sub`) or use
        `jax.random.fold_in(key, step)`
    note: it is made before the comprehension and never re-bound in it: `jax.random.normal` draws the
        same random numbers on every iteration
"""),
        Example("""
import jax
for i in range(n_rollouts):
    rng = jax.random.key(0)
    actions = jax.random.categorical(rng, logits)
    rollouts.append(actions)
""", expect="""
4:15-4:50 PRNG key `rng` is the same on every iteration of the loop at line 2
    help: split it per iteration (`key, sub = jax.random.split(key)` and draw from `sub`) or use
        `jax.random.fold_in(key, step)`
    note: it is re-made from the same seed by `jax.random.key(0)` at line 3 on every iteration:
        `jax.random.categorical` draws the same random numbers on every iteration
"""),
        Example("""
import jax
import jax.numpy as jnp
def dropout(x, rate, key=jax.random.PRNGKey(0)):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)
def loss_fn(params, x, y):
    h = dropout(jnp.tanh(x @ params["w1"]), 0.1)
    return jnp.mean((h @ params["w2"] - y) ** 2)
def train(params, batches):
    for x, y in batches:
        grads = jax.grad(loss_fn)(params, x, y)
        params = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
""", expect="""
3:26-3:47 default key `key=jax.random.PRNGKey(0)` of `dropout` is made once and reused by calls that
    omit it
    help: make `key` a required parameter and pass each call a fresh key (`key, sub =
        jax.random.split(key)`)
    note: the default is evaluated once, when `def dropout` runs, and `jax.random.bernoulli` at line 4
        draws from it: every call that leaves `key` out (as at line 7, which runs more than once) draws
        the same random numbers
"""),
        Example("""
from jax import random
def augment(images, rng=random.key(42)):
    flips = random.bernoulli(rng, 0.5, (images.shape[0],))
    return images.at[flips].set(images[flips, :, ::-1])
train_x = augment(train_x)
val_x = augment(val_x)
""", expect="""
2:25-2:39 default key `rng=random.key(42)` of `augment` is made once and reused by calls that omit it
    help: make `rng` a required parameter and pass each call a fresh key (`key, sub =
        jax.random.split(key)`)
    note: the default is evaluated once, when `def augment` runs, and `jax.random.bernoulli` at line 3
        draws from it: every call that leaves `rng` out (as at line 6, which runs more than once) draws
        the same random numbers
"""),
        Example("""
import jax
def encode(params, images, key):
    rng = jax.random.fold_in(key, 1)
    noisy = vae.apply(params, images, method=vae.add_noise, rngs={"noise": rng})
    return vae.apply(params, noisy, method=vae.reparametrize, rngs={"noise": rng})
""", expect="""
5:12-5:83 PRNG key `rng` already drawn from at line 4, with no `split`/`fold_in` between
    help: split the key and give each draw its own subkey (`k1, k2 = jax.random.split(key)`)
    note: `vae.apply(rngs=...)` here draws the same random numbers as `vae.apply(rngs=...)` at line 4
        (with jax 0.10 even draws of different shapes share their leading numbers)
"""),
    )
    not_flagged = (
        Example("""
import haiku as hk
import jax
rng_key = jax.random.PRNGKey(0)
x = jax.random.normal(rng_key, (128, 3))
x_dummy = jax.random.normal(rng_key, (1, 3))  # a sample input: init reads its shape
model = hk.transform(lambda x: hk.Linear(1)(x))
params = model.init(rng=jax.random.PRNGKey(1), x=x_dummy)
"""),
        Example("""
from jax import random
key = random.PRNGKey(0)
print(random.normal(key, shape=(1,)))
print(random.normal(key, shape=(1,)))  # the same numbers: a key is not a state
"""),
        Example("""
import jax
import jax.numpy as jnp
def layer(w, x):
    return jnp.tanh(x @ w)
key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (1024, 1024))
x = jax.random.normal(key, (8, 1024))
compiled = jax.jit(layer).lower(w, x).compile()
compiled(w, x).block_until_ready()
"""),
        Example("""
import jax
class Sampler:
    def __init__(self):
        self.key = jax.random.PRNGKey(0)
    def next_key(self):
        self.key, sub = jax.random.split(self.key)
        return sub
    def fit(self, params, batches):
        for batch in batches:
            mask = jax.random.bernoulli(self.next_key(), 0.9, batch.shape)
            params = update(params, batch * mask)
        return params
"""),
        Example("""
import jax
key = jax.random.PRNGKey(0)
def train_step(params, batch, step_key):
    mask = jax.random.bernoulli(step_key, 0.9, batch.shape)
    return update(params, batch * mask)
for batch in batches:
    key, step_key = jax.random.split(key)
    params = train_step(params, batch, step_key)
"""),
        Example("""
import jax
import numpy as np
def test_sampler_is_deterministic():
    key = jax.random.PRNGKey(7)
    first = jax.random.normal(key, (4,))
    second = jax.random.normal(key, (4,))
    np.testing.assert_array_equal(first, second)
"""),
        Example("""
import jax
key = jax.random.key(0)
jax.random.uniform(key, (3,))
jax.random.uniform(key, (3,))
"""),
        Example("""
import jax
def forward(params, x, rng):
    z = encoder.apply(params["encoder"], x, rngs={"dropout": rng})
    return decoder.apply(params["decoder"], z, rngs={"dropout": rng})
"""),
        Example("""
import jax
def init_params(model, x, rng):
    variables = model.apply({}, x, rngs={"params": rng, "dropout": rng}, mutable=["params"])[1]
    return variables["params"]
"""),
        Example("""
import jax
key = jax.random.PRNGKey(0)
for step in range(num_steps):
    key, mask_key = jax.random.split(key)
    mask = jax.random.bernoulli(mask_key, 0.9, (batch_size, hidden))
    params, opt_state, loss = train_step(params, opt_state, batch, mask)
"""),
        Example("""
import jax
@jax.jit
def train_step(state, batch, dropout_rng):
    dropout_rng = jax.random.fold_in(dropout_rng, state.step)
    logits = state.apply_fn({"params": state.params}, batch["x"], rngs={"dropout": dropout_rng})
    return state, logits

rng = jax.random.PRNGKey(0)
for batch in batches:
    state, logits = train_step(state, batch, rng)
"""),
        Example("""
import jax
def sample_noise(key, shape, kind):
    if kind == "gaussian":
        return jax.random.normal(key, shape)
    else:
        return jax.random.uniform(key, shape, minval=-1.0, maxval=1.0)
"""),
        Example("""
import jax
class Agent:
    def act(self, obs):
        self.rng, key = jax.random.split(self.rng)
        return jax.random.categorical(key, self.policy(obs))
"""),
        Example("""
import jax
key = jax.random.PRNGKey(0)
for step in range(num_steps):
    step_key = jax.random.fold_in(key, step)
    noise = jax.random.normal(step_key, (batch_size, latent_dim))
"""),
        Example("""
import jax
keys = jax.random.split(key, num_envs)
actions = jax.vmap(lambda k, logits: jax.random.categorical(k, logits))(keys, logits)
w = jax.random.normal(keys[0], (4,))
b = jax.random.normal(keys[1], (4,))
"""),
        Example("""
import jax
def normal(key, shape):
    return shape
key = jax.random.PRNGKey(0)
a = normal(key, (3,))
b = normal(key, (4,))
"""),
        Example("""
import jax
def make_dataset(n, key=jax.random.PRNGKey(0)):
    x = jax.random.normal(key, (n, 8))
    return x, x @ true_w
train_x, train_y = make_dataset(1024)
"""),
        Example("""
import jax
def add_noise(x, key=jax.random.PRNGKey(0)):
    return x + 0.1 * jax.random.normal(key, x.shape)
root = jax.random.PRNGKey(1)
for step in range(steps):
    root, sub = jax.random.split(root)
    noisy = add_noise(batch, sub)
"""),
        Example("""
import jax
def create_state(model, x, rng=jax.random.PRNGKey(0)):
    return model.init(rng, x)
states = [create_state(model, x) for model in models]
"""),
    )

    def visit_Module(self, node: cst.Module) -> None:
        for reuse in self.ctx.prng.reuses:
            if reuse.first is not None:
                self._report_pair(reuse)
            else:
                self._report_loop(reuse)
        for fn, param, draw, call in self.ctx.prng.default_keys:
            ctx, name = self.ctx, param.name.value
            headline = ""
            for limit in (40, 30, 20, 12):
                headline = (f"default key `{name}={ctx.snippet(param.default, limit)}` of `{fn.name.value}` is made "
                            "once and reused by calls that omit it")
                if len(headline) <= HEADLINE_LIMIT:
                    break
            self.report(param.default, headline,
                        help=f"make `{name}` a required parameter and pass each call a fresh key "
                             "(`key, sub = jax.random.split(key)`)",
                        note=f"the default is evaluated once, when `def {fn.name.value}` runs, and {draw.what} at "
                             f"line {ctx.line_of(draw.call)} draws from it: every call that leaves `{name}` out (as at "
                             f"line {ctx.line_of(call)}, which runs more than once) draws the same random numbers")

    def _report_pair(self, reuse: Reuse) -> None:
        ctx = self.ctx
        draw, first = reuse.draw, reuse.first
        assert first is not None
        same = (f"draws the same random numbers as {first.what} at line {ctx.line_of(first.call)} {_SAME_PREFIX}"
                if draw.what == first.what else
                f"draws from the same random bits as {first.what} at line {ctx.line_of(first.call)} (its numbers "
                "are correlated with those, not independent)")
        self.report(draw.call, f"PRNG key `{ctx.snippet(draw.key, 20)}` already drawn from at line "
                               f"{ctx.line_of(first.call)}, with no `split`/`fold_in` between",
                    help="split the key and give each draw its own subkey (`k1, k2 = jax.random.split(key)`)",
                    note=f"{draw.what} here {same}")

    def _report_loop(self, reuse: Reuse) -> None:
        ctx = self.ctx
        draw, root, loop = reuse.draw, reuse.root, reuse.loop
        where = "comprehension" if isinstance(loop, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)) \
            else "loop"
        key = f"`{ctx.snippet(draw.key, 30 if where == 'loop' else 22)}`"
        if root is None:
            why = f"it is made before the {where} and never re-bound in it"
        elif isinstance(root, cst.Call) and ctx.names.callee(root) in KEY_MAKERS:
            why = (f"it is re-made from the same seed by `{ctx.snippet(root, 40)}` at line {ctx.line_of(root)} on "
                   "every iteration")
        else:
            why = (f"it comes from `{ctx.snippet(root, 40)}` at line {ctx.line_of(root)}, which derives the same "
                   f"keys on every iteration (the key it splits is never re-bound in the {where})")
        self.report(draw.call, f"PRNG key {key} is the same on every iteration of the {where} at line "
                               f"{ctx.line_of(loop)}",
                    help="split it per iteration (`key, sub = jax.random.split(key)` and draw from `sub`) or use "
                         "`jax.random.fold_in(key, step)`",
                    note=f"{why}: {draw.what} draws the same random numbers on every iteration")
