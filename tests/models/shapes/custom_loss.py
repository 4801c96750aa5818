"""A model trained with a custom loss class (a keras.losses.Loss subclass with its own
config), shaped like the Keras guide users copy ("Training & evaluation with the built-in
methods": a custom loss that adds a variance penalty to the mean squared error)."""

import numpy as np

precsearch_config = {"batch_size": 32}


def build_model():
    import keras
    from keras import ops

    class CustomMSE(keras.losses.Loss):
        def __init__(self, regularization_factor=0.1, name="custom_mse"):
            super().__init__(name=name)
            self.regularization_factor = regularization_factor

        def call(self, y_true, y_pred):
            y_pred = ops.cast(y_pred, "float32")
            mse = ops.mean(ops.square(y_true - y_pred), axis=-1)
            reg = ops.mean(ops.square(0.5 - y_pred), axis=-1)
            return mse + reg * self.regularization_factor

        def get_config(self):
            return {"regularization_factor": self.regularization_factor, "name": self.name}

    inputs = keras.Input(shape=(12,), name="digits")
    x = keras.layers.Dense(32, activation="relu", name="dense_1")(inputs)
    x = keras.layers.Dense(32, activation="relu", name="dense_2")(x)
    outputs = keras.layers.Dense(4, name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=CustomMSE())
    return model


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 12)).astype("float32")
    w = np.random.default_rng(3).normal(size=(12, 4)) / 4
    return x, (x @ w + 0.5).astype("float32")


def train_data():
    return _data(512, 0)


def val_data():
    return _data(128, 1)
