"""An MLP with a layer that is very slow when it computes in float16.

On CPUs that emulate float16 every layer is like this; this CPU may not, so the test
stands the slowdown in deterministically: 200 chained matmuls only under float16.
"""

import keras
import numpy as np


class SlowInFloat16(keras.layers.Layer):
    def call(self, x):
        if self.compute_dtype == "float16":
            w = keras.ops.eye(x.shape[-1], dtype=x.dtype)
            for _ in range(200):
                x = keras.ops.matmul(x, w)
        return x


def build_model():
    model = keras.Sequential(
        [
            keras.Input((256,)),
            keras.layers.Dense(256, activation="relu"),
            SlowInFloat16(name="slow"),
            keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def train_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 256)).astype("float32")
    return x, (x[:, 0] > 0).astype("int64")
