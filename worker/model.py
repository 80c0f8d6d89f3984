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


def create_step_variables(model: keras.Model, element_spec=None) -> None:
    """Create now the variables the first training step would create: the optimizer's (its
    slots), and with ``element_spec`` (the training data's, ``(images, labels)``) the compiled
    metrics'. Call in the strategy's scope, before ``fit`` or the first ``strategy.run``.

    A ``tf.function`` whose first trace creates variables is traced twice: once allowed to
    create them, then again forbidden to (TensorFlow's polymorphic_function ``_call``). The
    step's trace is most of a task's first step, which every restart waits for: measured with
    bench/restart_parts.py, ``fit``'s first step took 1.0-1.2 s of CPU traced twice and 0.69-0.78 s
    once, creating the variables here 0.06 s. The values are the same either way (the optimizer's
    slots start at zero, the metrics' totals too; a restore assigns them at once instead of on
    creation)."""
    model.optimizer.build(model.trainable_variables)
    if element_spec is None:
        return
    _, labels = element_spec
    # Shapes decide which accuracy "accuracy" means (sparse: labels of one rank less); one example.
    y_pred = tf.zeros([1, *model.output_shape[1:]])
    y_true = tf.zeros([1, *labels.shape[1:]], labels.dtype)
    model.compiled_loss.build(y_pred)
    model.compiled_metrics.build(y_pred, y_true)


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
