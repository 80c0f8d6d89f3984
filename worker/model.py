"""The seeds' CNN: Conv2D 32 -> MaxPool -> Flatten -> Dense 64 -> Dense 10 (logits)."""

from __future__ import annotations

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
