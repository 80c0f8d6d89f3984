"""The seeds' CNN: Conv2D 32 -> MaxPool -> Flatten -> Dense 64 -> Dense 10 (logits), and the
one gradient step both custom loops (MWMS and PSS) run per replica."""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras


def build_cnn(input_shape: tuple, num_classes: int = 10, learning_rate: float = 1e-3) -> keras.Model:
    """Build and compile; call inside ``strategy.scope()`` so variables are distributed."""
    model = keras.Sequential(
        [
            keras.layers.InputLayer(input_shape=input_shape),
            keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(num_classes),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def per_example_loss() -> keras.losses.Loss:
    """The compiled loss without reduction: custom loops average it over the *global* batch."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)


def gradient_step(model: keras.Model, loss_fn: keras.losses.Loss, accuracy: keras.metrics.Metric, images, labels,
                  global_batch: int):
    """One replica's step inside ``strategy.run``: forward, loss averaged over the global batch
    (so the strategy's gradient sum is the global mean), apply, accuracy. Returns the loss."""
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = tf.nn.compute_average_loss(loss_fn(labels, logits), global_batch_size=global_batch)
    grads = tape.gradient(loss, model.trainable_variables)
    model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
    accuracy.update_state(labels, logits)
    return loss
