"""A tiny MLP whose marked layer yields NaN when it computes in bfloat16."""

import sys
from pathlib import Path

import keras

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data, tiny_model  # noqa: E402

precsearch_config = {"batch_size": 32}


class NanInBfloat16(keras.layers.Layer):
    def call(self, x):
        if self.compute_dtype == "bfloat16":
            return x + keras.ops.cast(float("nan"), x.dtype)
        return x


def build_model():
    return tiny_model(
        keras.layers.Dense(16, activation="relu", name="hidden"),
        NanInBfloat16(name="marked"),
        keras.layers.Dense(2, name="logits"),
    )


def train_data():
    return sign_data(256)
