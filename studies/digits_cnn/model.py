"""A small CNN on scikit-learn's digits (8x8 grey images, 10 classes; no download)."""

import numpy as np

precsearch_config = {"batch_size": 64, "steps": 80, "trials": 12}


def build_model():
    import keras

    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv1"),
            keras.layers.Conv2D(64, 3, padding="same", activation="relu", name="conv2"),
            keras.layers.MaxPooling2D(name="pool"),
            keras.layers.Flatten(name="flatten"),
            keras.layers.Dense(128, activation="relu", name="dense"),
            keras.layers.Dense(10, name="logits"),
        ],
        name="digits_cnn",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _digits():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]
    return x, digits.target.astype("int64")


def train_data():
    x, y = _digits()
    return x[:1500], y[:1500]


def val_data():
    x, y = _digits()
    return x[1500:], y[1500:]
