"""A tiny MLP with a marked layer that misbehaves only when it computes in bfloat16.

PRECSEARCH_FAULT picks how: abort (the process dies with SIGABRT), hang (sleeps forever),
oom (raises TensorFlow's ResourceExhaustedError). The fault fires while the step is
traced, as real crashes in kernels and tracing do.
"""

import os
import sys
import time
from pathlib import Path

import keras

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data, tiny_model  # noqa: E402

FAULT = os.environ.get("PRECSEARCH_FAULT", "")
print("faulty model file imported; this print must not garble the worker's replies")


class Marked(keras.layers.Layer):
    def call(self, x):
        if self.compute_dtype == "bfloat16":
            if FAULT == "abort":
                os.abort()
            if FAULT == "hang":
                time.sleep(10**6)
            if FAULT == "oom":
                import tensorflow as tf

                raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
        return x


def build_model():
    return tiny_model(
        keras.layers.Dense(16, activation="relu"),
        Marked(name="marked"),
        keras.layers.Dense(2),
    )


def train_data():
    return sign_data(256)
