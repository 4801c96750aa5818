"""A model whose forward pass fits float16 and whose backward pass does not: two layers
that pass their input through and multiply their gradient by 60000, so that under
dynamic loss scaling every step overflows and the scale halves each step."""

import sys
from pathlib import Path

import keras

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data, tiny_model  # noqa: E402

precsearch_config = {"batch_size": 32}


class Boost(keras.layers.Layer):
    """Identity forward (``x + c * 0``); the gradient times ``1 + c`` backward."""

    def call(self, x):
        c = keras.ops.cast(6e4, x.dtype)  # float16 holds it; its square it does not
        return x + c * (x - keras.ops.stop_gradient(x))


def build_model():
    return tiny_model(
        keras.layers.Dense(16, activation="relu", name="hidden"),
        Boost(name="boost"),
        Boost(name="boost2"),
        keras.layers.Dense(2, name="logits"),
    )


def train_data():
    return sign_data(128)
