"""`ctx.optimizer_state`: which optimizer an optax `update` belongs to, and which update results are lost."""
import textwrap

import libcst as cst

from lintloop.analysis import FileContext


def _ctx(source):
    return FileContext(cst.parse_module(textwrap.dedent(source).lstrip()))


def _only_update(source):
    ctx = _ctx(source)
    [call] = ctx.optimizer_state.update_calls
    return ctx, call


def test_optimizer_of_names_the_factory_and_what_losing_its_state_costs():
    cases = {
        "tx = optax.adam(1e-3)": ("optax.adam", "step count stays 0"),
        "tx = optax.sgd(0.1, momentum=0.9)": ("optax.sgd (momentum)", "momentum is silently off"),
        "tx = optax.sgd(0.1, 0.9)": ("optax.sgd (momentum)", "momentum is silently off"),
        "tx = optax.sgd(optax.linear_schedule(0.0, 0.1, 100))": ("optax.sgd", "schedule is frozen"),
        "tx = optax.inject_hyperparams(optax.adamw)(learning_rate=0.1)": ("optax.adamw", "step count stays 0"),
        "tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))": ("optax.chain(...)",
                                                                               "step count stays 0"),
    }
    for line, (label, cost) in cases.items():
        ctx, call = _only_update(f"""
            import optax
            {line}
            updates, state = tx.update(grads, state, params)
        """)
        optimizer = ctx.optimizer_state.optimizer_of(call)
        assert optimizer.label == label and cost in optimizer.cost and not optimizer.stateless, line


def test_stateless_and_unknown_optimizers():
    ctx, call = _only_update("""
        from optax import sgd, chain, clip
        tx = chain(clip(1.0), sgd(0.1))
        updates, state = tx.update(grads, state)
    """)
    assert ctx.optimizer_state.optimizer_of(call).stateless
    ctx, call = _only_update("""
        import jax
        def step(tx, grads, state):
            return tx.update(grads, state)
    """)
    assert not ctx.optimizer_state.optimizer_of(call).known


def test_optimizer_passed_to_a_step_function_and_flax_tx_are_followed():
    ctx, call = _only_update("""
        import jax
        import optax
        def step(opt, grads, state):
            return opt.update(grads, state)
        for g in grads_list:
            updates, s = step(optax.rmsprop(0.1), g, s)
    """)
    assert ctx.optimizer_state.optimizer_of(call).label == "optax.rmsprop"
    ctx, call = _only_update("""
        import jax
        import optax
        from flax.training import train_state
        state = train_state.TrainState.create(apply_fn=f, params=p, tx=optax.lion(1e-4))
        def step(state, grads):
            updates, new_opt_state = state.tx.update(grads, state.opt_state, state.params)
            return state.replace(opt_state=new_opt_state)
    """)
    assert ctx.optimizer_state.optimizer_of(call).label == "optax.lion"


def test_lost_state_kinds_and_the_loop_that_repeats_them():
    ctx, call = _only_update("""
        import jax
        import optax
        tx = optax.adam(1e-3)
        @jax.jit
        def train_step(params, opt_state, batch):
            grads = jax.grad(loss)(params, batch)
            updates, new_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), new_state
        def main(params, opt_state):
            for batch in data:
                params, _ = train_step(params, opt_state, batch)
    """)
    lost = ctx.optimizer_state.lost_state(call)
    assert lost is not None and not lost.certain and lost.how == "`opt_state` is never re-bound"
    assert isinstance(lost.loop, cst.For) and len(lost.chain) == 1
    ctx, call = _only_update("""
        import jax
        import optax
        tx = optax.adam(1e-3)
        step = jax.jit(lambda p, s: p)
        def train_step(params, opt_state, batch):
            updates, _ = tx.update(jax.grad(loss)(params, batch), opt_state)
            return optax.apply_updates(params, updates), opt_state
        fast_step = jax.jit(train_step)
        for batch in data:
            params, opt_state = fast_step(params, opt_state, batch)
    """)
    lost = ctx.optimizer_state.lost_state(call)
    assert lost is not None and lost.certain and lost.how == "discarded (`_`)" and len(lost.chain) == 1


def test_fed_back_states_are_not_lost():
    sources = [
        # re-bound under another name in the loop
        """
        import optax
        tx = optax.adam(1e-3)
        for batch in data:
            updates, new_state = tx.update(grads, opt_state)
            opt_state = new_state
        """,
        # a TrainState-like container re-bound by the caller's loop
        """
        import jax
        import optax
        tx = optax.adam(1e-3)
        def step(state, grads):
            updates, new_opt = tx.update(grads, state.opt_state)
            return state._replace(opt_state=new_opt)
        for g in grads_list:
            state = step(state, g)
        """,
        # no loop in sight
        """
        import optax
        tx = optax.adam(1e-3)
        def step(params, opt_state, grads):
            updates, _ = tx.update(grads, opt_state)
            return updates
        """,
    ]
    for source in sources:
        ctx, call = _only_update(source)
        assert ctx.optimizer_state.lost_state(call) is None, source


def test_lost_apply_results():
    ctx = _ctx("""
        import jax
        import optax
        for batch in data:
            new_params = optax.apply_updates(params, updates)
            print(new_params)
            state.apply_gradients(grads=grads)
    """)
    states = ctx.optimizer_state
    found = {ctx.snippet(c.func): states.lost_result(c) for c in states.apply_calls}
    assert found["optax.apply_updates"].how == "`params` is never re-bound"
    assert found["state.apply_gradients"].how == "dropped (the call's result is never bound)"
    ctx = _ctx("""
        import tensorflow as tf
        for x, y in data:
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """)
    assert ctx.optimizer_state.apply_calls == []


def test_a_method_called_on_an_instance_from_a_loop_is_repeated():
    ctx = _ctx("""
        import functools
        import jax
        import optax
        class GAN:
            @functools.partial(jax.jit, static_argnums=0)
            def update(self, params, opt_state, batch):
                grads = jax.grad(self.loss)(params, batch)
                updates, opt_state = self.tx.update(grads, opt_state)
                optax.apply_updates(params, updates)
                return params, opt_state
        gan = GAN()
        for batch in data:
            params, opt_state = gan.update(params, opt_state, batch)
    """)
    [apply] = ctx.optimizer_state.apply_calls
    lost = ctx.optimizer_state.lost_result(apply)
    assert lost is not None and lost.certain and ctx.snippet(lost.chain[0]) == "gan.update(params, opt_state, batch)"
