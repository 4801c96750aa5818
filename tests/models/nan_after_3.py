"""A model whose loss becomes NaN after step 3 (a layer that poisons its output)."""

import sys
from pathlib import Path

import keras

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data, tiny_model  # noqa: E402


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
    return tiny_model(
        keras.layers.Dense(16, activation="relu"),
        PoisonAfter(3, name="poison"),
        keras.layers.Dense(2),
    )


def train_data():
    return sign_data(256)
