"""A tiny MLP whose marked layer yields NaN when it computes in bfloat16."""

import keras
import numpy as np

precsearch_config = {"batch_size": 32}


class NanInBfloat16(keras.layers.Layer):
    def call(self, x):
        if self.compute_dtype == "bfloat16":
            return x + keras.ops.cast(float("nan"), x.dtype)
        return x


def build_model():
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu", name="hidden"),
            NanInBfloat16(name="marked"),
            keras.layers.Dense(2, name="logits"),
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
