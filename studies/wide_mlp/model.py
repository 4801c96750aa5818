"""A wide MLP on generated, learnable data: matmul-bound, where low precision can pay."""

import numpy as np

precsearch_config = {"batch_size": 128, "steps": 60, "trials": 10}

FEATURES, CLASSES = 512, 10


def build_model():
    import keras

    model = keras.Sequential(
        [
            keras.Input((FEATURES,), name="features"),
            keras.layers.Dense(1024, activation="relu", name="dense_1"),
            keras.layers.Dense(1024, activation="relu", name="dense_2"),
            keras.layers.Dense(CLASSES, name="logits"),
        ],
        name="wide_mlp",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _data(n, seed):
    # Labels from a fixed random two-layer teacher: learnable, but not in a few steps.
    teacher = np.random.default_rng(1234)
    w1 = teacher.normal(size=(FEATURES, 64)) / np.sqrt(FEATURES)
    w2 = teacher.normal(size=(64, CLASSES))
    x = np.random.default_rng(seed).normal(size=(n, FEATURES)).astype("float32")
    return x, np.argmax(np.tanh(x @ w1) @ w2, axis=1).astype("int64")


def train_data():
    return _data(8192, 0)


def val_data():
    return _data(1024, 1)
