"""A model with the pitfalls `precsearch doctor` looks for: a float16 softmax, widths that
are not multiples of 8, and a layer whose activations overflow float16."""

import sys
from pathlib import Path

import keras

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data, tiny_model  # noqa: E402

precsearch_config = {"batch_size": 32}


class Amplify(keras.layers.Layer):
    """Multiplies by 1e5: past float16's 65504 for any input above 0.66."""

    def call(self, x):
        return x * keras.ops.cast(1e5, x.dtype)


def build_model():
    return tiny_model(
        keras.layers.Dense(30, activation="relu", name="odd"),
        Amplify(name="amplify"),
        keras.layers.Dense(16, name="scores"),
        keras.layers.Activation("softmax", dtype="mixed_float16", name="softmax16"),
        keras.layers.Dense(2, name="logits"),
    )


def train_data():
    return sign_data(128)
