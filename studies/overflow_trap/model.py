"""A model with a layer whose intermediate values overflow float16 (max 65504).

`naive_softmax` is a hand-rolled softmax without subtracting the maximum: exp() of
activations around 15-25 is ~10^6-10^11 - fine in float32 and bfloat16, infinite in
float16, and inf/inf is NaN. Global mixed_float16 therefore fails at the first step,
while a policy that keeps `naive_softmax` in float32 trains like FP32.
"""

import numpy as np

precsearch_config = {"batch_size": 64, "steps": 60, "trials": 10, "dtypes": ["float32", "float16"]}

FEATURES = 32


def build_model():
    import keras

    class NaiveSoftmax(keras.layers.Layer):
        def call(self, x):
            e = keras.ops.exp(x)
            return e / keras.ops.sum(e, axis=-1, keepdims=True)

    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(64, name="wide"),
            NaiveSoftmax(name="naive_softmax"),
            keras.layers.Dense(64, activation="relu", name="hidden"),
            keras.layers.Dense(2, name="logits"),
        ],
        name="overflow_trap",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 10.0, size=(n, FEATURES)).astype("float32")  # wide's outputs ~±20
    y = (x[:, 0] > x[:, 1]).astype("int64")
    return x, y


def train_data():
    return _data(2048, 0)


def val_data():
    return _data(256, 1)
