"""JAX PRNG keys (LL901): which key value each eager `jax.random` sampler call draws from.

`install_random(jax)` replaces the sampling functions on the `jax.random` module (`import jax`
imports it; the hooks install before the program's `from jax.random import normal` binds a name).
Each eager call -- the key a concrete array, not a tracer: draws inside `jit` / `scan` are not
seen -- fingerprints its key (the key's raw data: `key_data` of a typed key, the uint32 array of a
`PRNGKey`) with the user's call site.  A key drawn from again emits `prng_reuse` (once per pair of
sites): the sampler, both sites, the draws so far from that key, and whether this draw equals the
first one (their first 64 numbers, same sampler and shape).  At the stop, `prng_keys`: eager
sampler calls, distinct keys, keys drawn from more than once, and the most drawn-from keys.

Cost per eager sampler call checked (a site's first 1,000 calls, then every 10th): the key's 8 bytes
(and the first 64 numbers of the draw, for a site's first 200 calls and on a reuse) copied to the
host; at most 100,000 keys remembered.
"""
import functools
import hashlib
import sys

from .events import emit, probe_error
from .frames import user_site
from .state import S, at_fork_in_child
from .steps import before_stop

# The `jax.random` functions that draw from the key they are given (jax 0.10): the analysis's
# `lintloop.analysis.prng.SAMPLERS`, repeated because the probe runs without lintloop (a test keeps
# them equal).
SAMPLERS = (
    "ball", "bernoulli", "beta", "binomial", "bits", "categorical", "cauchy", "chisquare", "choice",
    "dirichlet", "double_sided_maxwell", "exponential", "f", "gamma", "generalized_normal", "geometric",
    "gumbel", "laplace", "loggamma", "logistic", "lognormal", "maxwell", "multinomial",
    "multivariate_normal", "normal", "orthogonal", "pareto", "permutation", "poisson", "rademacher",
    "randint", "rayleigh", "shuffle", "t", "triangular", "truncated_normal", "uniform", "wald",
    "weibull_min",
)
MAX_KEYS = 100_000
# Fingerprinting waits for the key (a host copy): ~40 us per eager draw on CPU (measured: 2,000
# split + normal(32) steps, 248 -> 300 us per step under the probe, 13 us of it other hooks). A site's
# first 1,000 calls are all checked, then every 10th (a key reused every step still shows).
CHECK_ALL_CALLS = 1000
CHECK_EVERY = 10
DIGEST_CALLS = 200      # per site: draws digested even when their key is new
DIGEST_VALUES = 64
TOP_KEYS = 5


class _Keys:
    def __init__(self):
        self.reset()

    def reset(self):
        self.keys = {}        # fingerprint -> {"count", "sites": {(file, line, sampler): draws}, "digest"}
        self.site_calls = {}  # (file, line) -> eager calls
        self.calls = 0
        self.pairs = set()    # (first site, this site) already reported
        self.busy = False


_K = _Keys()


def install_random(jax):
    random = sys.modules.get("jax.random") or getattr(jax, "random", None)
    if random is None:  # not a real jax (no `jax.random`): nothing to wrap
        return
    import numpy as np

    at_fork_in_child(_K.reset)
    before_stop.append(_summary)
    tracer = jax.core.Tracer
    for name in SAMPLERS:
        original = getattr(random, name, None)
        if original is not None and not getattr(original, "_lintloop_wrapped", False):
            setattr(random, name, _wrap(original, name, jax, np, tracer))


def _wrap(original, name, jax, np, tracer):
    @functools.wraps(original)
    def sampler(key, *args, **kwargs):
        result = original(key, *args, **kwargs)
        if _K.busy or isinstance(key, tracer) or isinstance(result, tracer):
            return result
        _K.busy = True
        try:
            _record(name, key, result, jax, np)
        except Exception as err:
            probe_error("jax_random", err)
        finally:
            _K.busy = False
        return result

    sampler._lintloop_wrapped = True
    return sampler


def _fingerprint(key, jax, np):
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        data = np.asarray(jax.random.key_data(key))
    else:
        data = np.asarray(key)
    return hashlib.blake2b(data.tobytes() + str(data.shape).encode(), digest_size=12).digest()


def _digest(name, result, np):
    head = np.asarray(result.ravel()[:DIGEST_VALUES])
    return (name, tuple(result.shape), hashlib.blake2b(head.tobytes(), digest_size=12).digest())


def _record(name, key, result, jax, np):
    file, line = user_site(3)
    site = (file, line)
    calls = _K.site_calls[site] = _K.site_calls.get(site, 0) + 1
    _K.calls += 1
    if calls > CHECK_ALL_CALLS and calls % CHECK_EVERY:
        return
    fingerprint = _fingerprint(key, jax, np)
    entry = _K.keys.get(fingerprint)
    if entry is None:
        if len(_K.keys) >= MAX_KEYS:
            return
        digest = _digest(name, result, np) if calls <= DIGEST_CALLS else None
        _K.keys[fingerprint] = {"count": 1, "sites": {(file, line, name): 1}, "digest": digest,
                                "first": (file, line, name), "step": S.steps, "identical": 0, "compared": 0}
        return
    entry["count"] += 1
    here = (file, line, name)
    entry["sites"][here] = entry["sites"].get(here, 0) + 1
    identical = None
    if entry["digest"] is not None and entry["digest"][:2] == (name, tuple(result.shape)):
        identical = _digest(name, result, np) == entry["digest"]
        entry["compared"] += 1
        entry["identical"] += bool(identical)
    pair = (entry["first"], here)
    if pair not in _K.pairs:
        _K.pairs.add(pair)
        first_file, first_line, first_name = entry["first"]
        emit({"type": "prng_reuse", "sampler": name, "first_sampler": first_name, "first_file": first_file,
              "first_line": first_line, "first_step": entry["step"], "step": S.steps, "draws": entry["count"],
              "site_call": calls, "identical": identical, "shape": list(result.shape),
              "file": file, "line": line}, site=False)


def _summary():
    try:
        reused = [e for e in _K.keys.values() if e["count"] > 1]
        reused.sort(key=lambda e: -e["count"])
        top = [{"draws": e["count"], "identical": e["identical"], "compared": e["compared"],
                "sites": [{"file": f, "line": ln, "sampler": s, "draws": n} for (f, ln, s), n in e["sites"].items()]}
               for e in reused[:TOP_KEYS]]
        if _K.calls:
            emit({"type": "prng_keys", "calls": _K.calls, "keys": len(_K.keys), "reused": len(reused), "top": top},
                 site=False)
    except Exception as err:
        probe_error("jax_random_summary", err)
