"""Custom TensorFlow training loop for a sparse regression model, with saliency maps at the end."""
import argparse

import numpy as np
import tensorflow as tf

model = tf.keras.Sequential([
    tf.keras.Input(shape=(32,)),
    tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dense(1),
])
optimizer = tf.keras.optimizers.Adam(1e-3)
mse = tf.keras.losses.MeanSquaredError()
val_mae = tf.keras.metrics.MeanAbsoluteError()


def train_step(x, y, l1):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        # L1 penalty on the first layer keeps the input weights sparse
        penalty = l1 * np.sum(np.abs(model.layers[0].kernel.numpy()))
        loss = mse(y, pred) + penalty
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def eval_step(x, y):
    pred = model(x, training=False)
    val_mae.update_state(y, pred)
    print("val batch loss:", mse(y, pred))


def saliency(x):
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        pred = model(x, training=False)
    return tf.abs(tape.gradient(pred, x))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--l1", type=float, default=1e-4)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4096, 32)).astype("float32")
    y = (x[:, :4] @ rng.normal(size=(4, 1))).astype("float32")
    train_ds = tf.data.Dataset.from_tensor_slices((x[:3584], y[:3584])).shuffle(3584).batch(128).prefetch(2)
    val_ds = tf.data.Dataset.from_tensor_slices((x[3584:], y[3584:])).batch(256).prefetch(2)

    history = []
    for epoch in range(args.epochs):
        epoch_losses = []
        for xb, yb in train_ds:
            loss = train_step(xb, yb, args.l1)
            epoch_losses.append(loss)
        history.append(float(np.mean(epoch_losses)))

        val_mae.reset_state()
        for xb, yb in val_ds:
            eval_step(xb, yb)
        tf.print("epoch", epoch, "train loss", history[-1], "val mae", val_mae.result())

    importance = tf.reduce_mean(saliency(x[:256]), axis=0).numpy()
    print("most important inputs:", np.argsort(importance)[::-1][:8])


if __name__ == "__main__":
    main()
