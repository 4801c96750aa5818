"""An MLP that cannot learn (learning rate 0) and has no validation data: nothing in its
FP32 training moves, so nothing can tell a candidate from FP32."""

import numpy as np

precsearch_config = {"batch_size": 32}


def build_model():
    import keras

    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def train_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    return x, (x[:, 0] > 0).astype("int64")
