"""A model with the pitfalls `precsearch doctor` looks for: a float16 softmax, widths that
are not multiples of 8, and a layer whose activations overflow float16."""

import keras
import numpy as np

precsearch_config = {"batch_size": 32}


class Amplify(keras.layers.Layer):
    """Multiplies by 1e5: past float16's 65504 for any input above 0.66."""

    def call(self, x):
        return x * keras.ops.cast(1e5, x.dtype)


def build_model():
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(30, activation="relu", name="odd"),
            Amplify(name="amplify"),
            keras.layers.Dense(16, name="scores"),
            keras.layers.Activation("softmax", dtype="mixed_float16", name="softmax16"),
            keras.layers.Dense(2, name="logits"),
        ]
    )
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def train_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 8)).astype("float32")
    return x, (x[:, 0] > 0).astype("int64")
