"""The reference worker's model: its training step is traced once, not twice (a restart's first
step waits for the trace), and training with the variables made ahead gives the same numbers."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.tf]


def train(made_ahead: bool, loop: str) -> tuple[int, list[float], list]:
    """Three steps of the worker's CNN on fixed data from seed 0; the step function's trace count,
    the losses, the weights after."""
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    from worker.model import build_cnn, create_step_variables, gradient_step, per_example_loss

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    images = rng.random((24, 8, 8, 1), dtype=np.float32)
    labels = rng.integers(0, 10, 24).astype(np.int64)
    data = tf.data.Dataset.from_tensor_slices((images, labels)).batch(8)
    model = build_cnn((8, 8, 1), 10)
    if loop == "fit":
        if made_ahead:
            create_step_variables(model, data.element_spec)
        losses: list[float] = []
        model.fit(data, epochs=1, verbose=0, shuffle=False,
                  callbacks=[keras.callbacks.LambdaCallback(
                      on_train_batch_end=lambda b, logs: losses.append(float(logs["loss"])))])
        return model.train_function.experimental_get_tracing_count(), losses, model.get_weights()
    if made_ahead:
        create_step_variables(model)
    accuracy = keras.metrics.SparseCategoricalAccuracy()
    loss_fn = per_example_loss()
    step = tf.function(lambda x, y: gradient_step(model, loss_fn, accuracy, x, y, 8))
    losses = [float(step(x, y)) for x, y in data]
    return step.experimental_get_tracing_count(), losses, model.get_weights()


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_step_variables_made_ahead_trace_the_step_once_and_train_the_same(loop):
    traces_ahead, losses_ahead, weights_ahead = train(True, loop)
    traces_lazy, losses_lazy, weights_lazy = train(False, loop)
    # Without them the first trace creates the optimizer's slots (and fit's metrics) and
    # TensorFlow traces again: the count tells the two apart.
    assert (traces_ahead, traces_lazy) == (1, 2), (traces_ahead, traces_lazy)
    assert len(losses_ahead) == 3 and losses_ahead == pytest.approx(losses_lazy, rel=1e-6), (losses_ahead, losses_lazy)
    for ahead, lazy in zip(weights_ahead, weights_lazy):
        assert ahead == pytest.approx(lazy, rel=1e-5, abs=1e-7)
