"""The shared MLP with a learning-rate schedule: a policy's batch size must scale it."""

import numpy as np

precsearch_config = {"batch_size": 32}

INITIAL_LR = 1e-3


def build_model():
    import keras

    return keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(32, activation="relu", name="hidden"),
            keras.layers.Dense(4, name="logits"),
        ]
    )


def compile_kwargs():
    import keras

    schedule = keras.optimizers.schedules.ExponentialDecay(INITIAL_LR, 100, 0.5)
    return {
        "optimizer": keras.optimizers.Adam(schedule),
        "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    }


def train_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 16)).astype("float32")
    return x, np.argmax(x @ np.random.default_rng(123).normal(size=(16, 4)), axis=1)
