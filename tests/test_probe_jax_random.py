"""The probe's PRNG key events (jax_random.py): an eager `jax.random` sampler given a key value that
was drawn from before (`prng_reuse`, with both sites and whether the draws are identical), the
`prng_keys` summary at the stop, and the LL901 verdict; quiet on split / folded keys and on draws
inside jitted code (the key there is a tracer).

Runs real JAX programs in child processes (CPU); skipped when jax is not installed.
"""
import textwrap

import pytest

from conftest import events_of, source_line
from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict

pytestmark = pytest.mark.framework
pytest.importorskip("jax")


def _run(tmp_path, body):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(body).lstrip())
    run = run_probe(path, [], steps=0, device="cpu", timeout=300)
    assert not run.timed_out and not events_of(run, "error") and not events_of(run, "probe_error"), run.stderr_tail
    return path, run, Summary.from_events(run.events, run.returncode, run.timed_out)


def test_a_key_drawn_from_again_is_reported_with_both_sites(tmp_path):
    path, run, summary = _run(tmp_path, """
        import jax
        from jax.random import normal, uniform

        key = jax.random.key(0)
        a = normal(key, (8,))
        b = normal(key, (8,))
        c = uniform(key, (3, 2))
        old = jax.random.PRNGKey(1)
        for step in range(5):
            noise = jax.random.normal(old, (4,))
    """)
    first, second, third = (source_line(path, t) for t in ("a = normal", "b = normal", "c = uniform"))
    loop = source_line(path, "noise = jax.random.normal")
    reuses = {(e["first_line"], e["line"]): e for e in events_of(run, "prng_reuse")}
    assert set(reuses) == {(first, second), (first, third), (loop, loop)}
    assert reuses[(first, second)]["identical"] is True  # same sampler and shape: the same numbers
    assert reuses[(first, third)]["identical"] is None   # another sampler: not compared
    assert reuses[(first, third)]["draws"] == 3 and reuses[(loop, loop)]["draws"] == 2
    [keys] = events_of(run, "prng_keys")
    assert keys["calls"] == 8 and keys["keys"] == 2 and keys["reused"] == 2
    most = keys["top"][0]
    assert most["draws"] == 5 and most["identical"] == 4 and most["compared"] == 4
    assert [(s["line"], s["sampler"], s["draws"]) for s in most["sites"]] == [(loop, "normal", 5)]
    result = verdict("LL901", summary)
    assert result["status"] == "confirmed" and result["evidence"]["signal"] == "prng_key_reuse"
    assert result["evidence"]["text"] == (f"one PRNG key drawn from 5 times, by `normal` at train.py:{loop} (5x): "
                                          "4 of 4 later draws identical to the first")


def test_split_and_folded_keys_and_jitted_draws_are_quiet(tmp_path):
    # `fold_in` uses a key of its own: with jax 0.10 `fold_in(key, i)` equals `split(key, n)[i]`, so
    # folding the key this loop also splits would draw from keys the loop splits off (measured).
    _, run, summary = _run(tmp_path, """
        import jax

        @jax.jit
        def noisy(x, key):
            return x + jax.random.normal(key, x.shape)

        key = jax.random.PRNGKey(0)
        base = jax.random.PRNGKey(1)
        x = jax.numpy.zeros(3)
        for step in range(5):
            key, sub = jax.random.split(key)
            a = jax.random.uniform(sub, (2,))
            b = jax.random.normal(jax.random.fold_in(base, step), (2,))
            x = noisy(x, key)
    """)
    assert events_of(run, "prng_reuse") == []
    [keys] = events_of(run, "prng_keys")
    assert keys == {**keys, "calls": 10, "keys": 10, "reused": 0, "top": []}  # the jitted draws: tracers, unseen
    result = verdict("LL901", summary)
    assert result["status"] == "not-confirmed"
    assert "10 eager sampler calls seen" in result["evidence"]["looked_for"]


def test_fold_in_of_a_key_that_is_also_split_collides(tmp_path):
    # jax 0.10.2 (threefry_partitionable): `fold_in(k, 1)` is `split(k)[1]`; the probe sees the collision.
    path, run, summary = _run(tmp_path, """
        import jax

        key = jax.random.PRNGKey(0)
        _, sub = jax.random.split(key)
        a = jax.random.normal(sub, (2,))
        b = jax.random.normal(jax.random.fold_in(key, 1), (2,))
    """)
    [reuse] = events_of(run, "prng_reuse")
    assert (reuse["first_line"], reuse["line"], reuse["identical"]) == (
        source_line(path, "a = jax"), source_line(path, "b = jax"), True)
    assert verdict("LL901", summary)["status"] == "confirmed"
