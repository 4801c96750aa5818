"""A tiny MLP on generated, learnable data: the shared test model."""

import os

import numpy as np

precsearch_config = {"batch_size": 32}

MODE = os.environ.get("PRECSEARCH_TEST_MODE", "")


def build_model():
    import keras

    model = keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(64, activation="relu", name="hidden"),
            keras.layers.Dense(64, activation="relu", name="hidden2"),
            keras.layers.Dense(4, name="logits"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 16)).astype("float32")
    w = np.random.default_rng(123).normal(size=(16, 4))
    return x, np.argmax(x @ w, axis=1)


def train_data():
    return _data(1024, 0)


def val_data():
    return _data(256, 1)
