"""Keras-Hub-style blocks: a backbone of registered, configurable residual blocks (each a
layer subclass with get_config, its own sublayers built in build()), a pooled head on
top; the shape of models built from a library's reusable blocks. Tiny sizes."""

import numpy as np

precsearch_config = {"batch_size": 32}


def build_model():
    import keras
    from keras import layers

    @keras.saving.register_keras_serializable(package="shapes")
    class ResidualBlock(layers.Layer):
        def __init__(self, filters, dropout=0.0, **kwargs):
            super().__init__(**kwargs)
            self.filters = filters
            self.dropout = dropout

        def build(self, input_shape):
            self.norm = layers.LayerNormalization(epsilon=1e-5)
            self.expand = layers.Dense(self.filters * 2, activation="gelu")
            self.project = layers.Dense(input_shape[-1])
            self.drop = layers.Dropout(self.dropout)

        def call(self, x, training=False):
            return x + self.drop(self.project(self.expand(self.norm(x))), training=training)

        def get_config(self):
            return {**super().get_config(), "filters": self.filters, "dropout": self.dropout}

    inputs = keras.Input(shape=(8, 16), name="features")
    x = layers.Dense(16, name="stem")(inputs)
    for i in range(2):
        x = ResidualBlock(16, dropout=0.1, name=f"block_{i}")(x)
    x = layers.GlobalAveragePooling1D()(x)
    outputs = layers.Dense(3, name="head")(x)
    model = keras.Model(inputs, outputs, name="backbone_with_head")
    model.compile(
        optimizer=keras.optimizers.AdamW(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8, 16)).astype("float32")
    return x, (x[:, :, :3].mean(axis=1)).argmax(axis=1)


def train_data():
    return _data(256, 0)


def val_data():
    return _data(64, 1)
