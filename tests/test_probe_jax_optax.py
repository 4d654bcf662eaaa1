"""The probe's optax events (jax_optax.py): per update site, whether the state passed in ever changed
(`jax_opt_state`); per apply_updates site, whether the parameters did (`jax_params`); JAX training
steps counted once per iteration at the first update site, eager or jitted, with the step cap; and
the LL905 verdicts on them.

Runs real JAX programs in child processes (CPU); skipped when jax or optax is not installed.
"""
import textwrap

import pytest

from conftest import events_of as _events, source_line as _line
from lintloop.runtime_probe.runner import run_probe
from lintloop.runtime_probe.verdicts import Summary, verdict

pytestmark = pytest.mark.framework
pytest.importorskip("jax")
pytest.importorskip("optax")

HEADER = """
import jax
import jax.numpy as jnp
import optax

x = jax.random.normal(jax.random.PRNGKey(0), (32, 4))
y = x @ jnp.arange(1.0, 5.0)
params = {"w": jnp.zeros(4)}

def loss_fn(params, x, y):
    return jnp.mean((x @ params["w"] - y) ** 2)
"""


def _script(tmp_path, body, steps=0):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(HEADER).lstrip() + textwrap.dedent(body))
    run = run_probe(path, [], steps=steps, device="cpu", timeout=300)
    assert not run.timed_out and not _events(run, "error") and not _events(run, "probe_error"), run.stderr_tail
    return path, run


def _verdict(run):
    return verdict("LL905", Summary.from_events(run.events, run.returncode, run.timed_out))


def test_discarded_adam_state_in_an_eager_loop_is_seen_and_confirmed(tmp_path):
    path, run = _script(tmp_path, """
        tx = optax.adam(0.1)
        opt_state = tx.init(params)
        for step in range(30):
            grads = jax.grad(loss_fn)(params, x, y)
            updates, _ = tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
    """)
    [state] = _events(run, "jax_opt_state")
    assert state["line"] == _line(path, "updates, _ =") and state["file"] == str(path)
    assert state["calls"] == 30 and state["checked"] == 14 and state["distinct_inputs"] == 1
    assert state["advanced"] and state["counts"] == [0] and not state["traced"]
    [applied] = _events(run, "jax_params")
    assert applied["distinct_inputs"] == applied["checked"] == 14
    result = _verdict(run)
    assert result["status"] == "confirmed" and result["evidence"]["signal"] == "opt_state_frozen"
    assert "step count stayed 0" in result["evidence"]["text"]
    steps = [e for e in _events(run, "stop")][-1]
    assert steps["steps"] == 30 and steps["kinds"] == {"jax_update": 30}


def test_state_fed_back_through_a_jitted_step_is_not_confirmed(tmp_path):
    path, run = _script(tmp_path, """
        tx = optax.sgd(0.05, momentum=0.9)

        @jax.jit
        def train_step(params, opt_state):
            grads = jax.grad(loss_fn)(params, x, y)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        opt_state = tx.init(params)
        for step in range(25):
            params, opt_state = train_step(params, opt_state)
    """)
    [state] = _events(run, "jax_opt_state")
    assert state["traced"] and state["calls"] == 25 and state["distinct_inputs"] == state["checked"] == 13
    [applied] = _events(run, "jax_params")
    assert applied["traced"] and applied["distinct_inputs"] == applied["checked"]
    assert _verdict(run)["status"] == "not-confirmed"


def test_lost_apply_updates_in_a_jitted_step_is_confirmed_and_steps_count_through_the_callback(tmp_path):
    path, run = _script(tmp_path, """
        tx = optax.sgd(0.05)

        @jax.jit
        def train_step(params, opt_state):
            grads = jax.grad(loss_fn)(params, x, y)
            updates, opt_state = tx.update(grads, opt_state, params)
            optax.apply_updates(params, updates)
            return params, opt_state

        opt_state = tx.init(params)
        for step in range(1000):
            params, opt_state = train_step(params, opt_state)
    """, steps=20)
    # `optax.sgd` without momentum has an empty state: nothing to watch, but its calls count the steps,
    # from XLA's callback, which records the cap (it cannot raise there: the stop is left pending).
    assert _events(run, "jax_opt_state") == []
    stop = _events(run, "stop")[-1]
    assert stop["reason"] == "step_limit" and stop["steps"] == 20
    [applied] = _events(run, "jax_params")
    assert applied["line"] == _line(path, "optax.apply_updates(params, updates)")
    assert applied["distinct_inputs"] == 1 and applied["nonzero_updates"] and applied["traced"]
    result = _verdict(run)
    assert result["status"] == "confirmed" and result["evidence"]["signal"] == "params_frozen"


def test_two_optimizers_count_one_step_per_iteration_and_the_cap_ends_an_eager_loop(tmp_path):
    _, run = _script(tmp_path, """
        g_tx, d_tx = optax.adam(0.01), optax.adam(0.02)
        g_params, d_params = dict(params), dict(params)
        g_state, d_state = g_tx.init(g_params), d_tx.init(d_params)
        for step in range(1000):
            grads = jax.grad(loss_fn)(d_params, x, y)
            updates, d_state = d_tx.update(grads, d_state, d_params)
            d_params = optax.apply_updates(d_params, updates)
            grads = jax.grad(loss_fn)(g_params, x, y)
            updates, g_state = g_tx.update(grads, g_state, g_params)
            g_params = optax.apply_updates(g_params, updates)
    """, steps=15)
    stop = _events(run, "stop")[-1]
    assert stop["reason"] == "step_limit" and stop["steps"] == 15 and stop["kinds"] == {"jax_update": 15}
    # The cap stops the program at the first optimizer's 15th update, before the second one's.
    assert sorted(e["calls"] for e in _events(run, "jax_opt_state")) == [14, 15]
    assert _verdict(run)["status"] == "not-confirmed"


def test_verdicts_need_three_checked_calls():
    events = [{"type": "jax_opt_state", "file": "t.py", "line": 9, "calls": 2, "checked": 2, "distinct_inputs": 1,
               "advanced": True, "counts": [0], "count_leaves": 1},
              {"type": "jax_params", "file": "t.py", "line": 10, "calls": 2, "checked": 2, "distinct_inputs": 1,
               "nonzero_updates": True}]
    assert verdict("LL905", Summary.from_events(events, 0, False))["status"] == "not-confirmed"
    events[0].update(calls=3, checked=3)
    result = verdict("LL905", Summary.from_events(events, 0, False))
    assert result["status"] == "confirmed" and result["evidence"]["line"] == 9


def test_a_state_that_never_changes_by_itself_is_not_confirmed():
    # A momentum trace with all-zero gradients returns the state it was given: nothing was lost.
    events = [{"type": "jax_opt_state", "file": "t.py", "line": 9, "calls": 40, "checked": 15,
               "distinct_inputs": 1, "advanced": False, "counts": [], "count_leaves": 0},
              {"type": "jax_params", "file": "t.py", "line": 10, "calls": 40, "checked": 15, "distinct_inputs": 1,
               "nonzero_updates": False}]
    assert verdict("LL905", Summary.from_events(events, 0, False))["status"] == "not-confirmed"


def test_a_library_train_state_is_watched_at_the_users_line(tmp_path):
    # flax's `TrainState.apply_gradients` calls `tx.update` and `optax.apply_updates` from its own file
    # (flax is not installed here: the same shape, from a module under site-packages, stands in).
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "trainstate_lib.py").write_text(textwrap.dedent('''
        import optax

        class TrainState:
            def __init__(self, params, tx):
                self.params, self.tx, self.opt_state = params, tx, tx.init(params)

            def apply_gradients(self, *, grads):
                updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
                new = TrainState(optax.apply_updates(self.params, updates), self.tx)
                new.opt_state = opt_state
                return new
    '''))
    path, run = _script(tmp_path, f"""
        import sys
        sys.path.insert(0, {str(library)!r})
        from trainstate_lib import TrainState
        state = TrainState(params, optax.adam(0.1))
        for step in range(20):
            state.apply_gradients(grads=jax.grad(loss_fn)(state.params, x, y))
    """)
    line = _line(path, "state.apply_gradients(grads=")
    [state] = _events(run, "jax_opt_state")
    [applied] = _events(run, "jax_params")
    assert state["line"] == applied["line"] == line
    assert state["distinct_inputs"] == 1 and applied["distinct_inputs"] == 1
    result = _verdict(run)
    assert result["status"] == "confirmed" and result["evidence"]["line"] == line
