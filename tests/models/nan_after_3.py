"""A model whose loss becomes NaN after step 3 (a layer that poisons its output)."""

import keras
import numpy as np


class PoisonAfter(keras.layers.Layer):
    def __init__(self, after=3, **kwargs):
        super().__init__(**kwargs)
        self.after = after

    def build(self, input_shape):
        self.calls = self.add_weight(shape=(), initializer="zeros", trainable=False)

    def call(self, x, training=None):
        if training:
            self.calls.assign_add(1.0)
        poisoned = keras.ops.greater(self.calls, float(self.after))
        # Added rather than selected with where(): the gradient of where() through a
        # NaN branch would poison the weights one step early.
        return x + keras.ops.cast(keras.ops.where(poisoned, float("nan"), 0.0), x.dtype)


def build_model():
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            PoisonAfter(3, name="poison"),
            keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def train_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    return x, (x[:, 0] > 0).astype("int64")
