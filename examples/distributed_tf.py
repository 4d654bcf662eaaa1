"""Multi-GPU training of an image classifier with MirroredStrategy and a custom training loop."""
import argparse

import tensorflow as tf

GLOBAL_BATCH_SIZE = 256


def make_dataset(split):
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.cifar10.load_data()
    x, y = (x_train, y_train) if split == "train" else (x_test, y_test)
    ds = tf.data.Dataset.from_tensor_slices((x.astype("float32") / 255.0, y))
    if split == "train":
        ds = ds.shuffle(10_000)
    return ds.batch(GLOBAL_BATCH_SIZE, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def build_model():
    return tf.keras.Sequential([
        tf.keras.Input(shape=(32, 32, 3)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(64, 3, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10),
    ])


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)

    strategy = tf.distribute.MirroredStrategy()

    optimizer = tf.keras.optimizers.Adam(1e-3)
    with strategy.scope():
        model = build_model()
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
        test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy()

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(loss_object(labels, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_accuracy.update_state(labels, logits)
        return loss

    def test_step(inputs):
        images, labels = inputs
        logits = model(images, training=False)
        test_accuracy.update_state(labels, logits)
        return tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=GLOBAL_BATCH_SIZE)

    @tf.function
    def distributed_train_step(batch):
        per_replica_losses = strategy.run(train_step, args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    @tf.function
    def distributed_test_step(batch):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(test_step, args=(batch,)), axis=None)

    train_dist = strategy.experimental_distribute_dataset(make_dataset("train"))
    test_dist = strategy.experimental_distribute_dataset(make_dataset("test"))
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for batch in train_dist:
            total += distributed_train_step(batch).numpy()
            batches += 1
        test_loss = sum(distributed_test_step(b).numpy() for b in test_dist)
        print(f"epoch {epoch}: loss {total / batches:.4f} acc {train_accuracy.result().numpy():.3f} "
              f"test loss {test_loss:.4f} test acc {test_accuracy.result().numpy():.3f}")
        train_accuracy.reset_state()
        test_accuracy.reset_state()


if __name__ == "__main__":
    main()
