"""A small JAX/optax regression with dropout: three mistakes that raise nothing and print nothing
wrong, which `lintloop check` reports."""
import jax
import jax.numpy as jnp
import optax

tx = optax.adam(1e-2)


def loss_fn(params, x, y, dropout_key):
    keep = jax.random.bernoulli(dropout_key, 0.9, x.shape)
    pred = (x * keep / 0.9) @ params["w"] + params["b"]
    return jnp.mean((pred - y) ** 2)


@jax.jit
def train_step(params, opt_state, x, y, dropout_key):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y, dropout_key)
    print("loss", loss)  # runs once, at trace time
    updates, _ = tx.update(grads, opt_state, params)  # Adam's state never advances
    return optax.apply_updates(params, updates), opt_state, loss


def main(steps: int = 100) -> None:
    key = jax.random.PRNGKey(0)
    data_key, init_key, dropout_key = jax.random.split(key, 3)
    true_w = jnp.arange(8.0)
    params = {"w": jax.random.normal(init_key, (8,)) * 0.1, "b": jnp.zeros(())}
    opt_state = tx.init(params)
    for step in range(steps):
        data_key, batch_key = jax.random.split(data_key)
        x = jax.random.normal(batch_key, (32, 8))
        y = x @ true_w
        # the same dropout mask on every step
        params, opt_state, loss = train_step(params, opt_state, x, y, dropout_key)
    print(f"final loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
