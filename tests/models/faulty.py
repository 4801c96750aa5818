"""A tiny MLP with a marked layer that misbehaves only when it computes in bfloat16.

PRECSEARCH_FAULT picks how: abort (the process dies with SIGABRT), hang (sleeps forever),
oom (raises TensorFlow's ResourceExhaustedError). The fault fires while the step is
traced, as real crashes in kernels and tracing do.
"""

import os
import time

import keras
import numpy as np

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
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            Marked(name="marked"),
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
