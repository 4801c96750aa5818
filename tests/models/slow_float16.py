"""An MLP with a layer that is very slow when it computes in float16.

On CPUs that emulate float16 every layer is like this; this CPU may not, so the test
stands the slowdown in deterministically: 200 chained matmuls only under float16.
"""

import sys
from pathlib import Path

import keras

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data, tiny_model  # noqa: E402


class SlowInFloat16(keras.layers.Layer):
    def call(self, x):
        if self.compute_dtype == "float16":
            w = keras.ops.eye(x.shape[-1], dtype=x.dtype)
            for _ in range(200):
                x = keras.ops.matmul(x, w)
        return x


def build_model():
    return tiny_model(
        keras.layers.Dense(256, activation="relu"),
        SlowInFloat16(name="slow"),
        keras.layers.Dense(2),
        features=256,
        optimizer="sgd",
    )


def train_data():
    return sign_data(512, features=256)
