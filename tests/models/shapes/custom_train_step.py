"""A subclassed model with its own train_step, shaped like the Keras guide users copy
("Customizing what happens in fit()", TensorFlow backend): a GradientTape over
compute_loss, the optimizer applied by hand, the metrics updated and returned."""

import numpy as np

precsearch_config = {"batch_size": 32}


def build_model():
    import keras
    import tensorflow as tf

    class CustomModel(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.hidden = keras.layers.Dense(32, activation="relu")
            self.out = keras.layers.Dense(1)

        def call(self, inputs):
            return self.out(self.hidden(inputs))

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(y=y, y_pred=y_pred)
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply(gradients, self.trainable_variables)
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    inputs = keras.Input(shape=(8,))
    model = CustomModel()
    model(inputs)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", metrics=["mae"])
    return model


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    w = np.random.default_rng(7).normal(size=(8, 1))
    return x, (x @ w).astype("float32")


def train_data():
    return _data(512, 0)


def val_data():
    return _data(128, 1)
