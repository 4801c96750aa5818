"""A model with one layer per classic low-precision pitfall that shows inside a layer
(precsearch/engine/layer_checks.py), each on its own branch of the input so that each
sees the range it is meant to: a softmax written out with exp (inputs up to ~60), a
standardization by a standard deviation (inputs up to ~900: their squares overflow
float16), a mean written as a sum over 16384 elements of magnitude 5-9, and a Gram
determinant (no float16 or bfloat16 kernel on TensorFlow's CPUs). Each computes finite
values in float32; the layers before them (Scale, Spread) are harmless. Each has a weight
of its own (a gain), as custom layers do, so that a search offers it a dtype."""

import sys
from pathlib import Path

import keras
from keras import ops

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data  # noqa: E402

precsearch_config = {"batch_size": 32}


class Scale(keras.layers.Layer):
    def __init__(self, factor, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * ops.cast(self.factor, x.dtype)

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


class Spread(keras.layers.Layer):
    """Magnitudes 5-9 (for inputs within ±4), tiled to 16384 elements an example."""

    def call(self, x):
        return ops.tile(ops.clip(ops.abs(x), 0.0, 4.0) + 5.0, [1, 2048])


class Gained(keras.layers.Layer):
    """A layer with a weight of its own: ``gain * compute(x)``."""

    def build(self, input_shape):
        self.gain = self.add_weight(shape=(), initializer="ones", name="gain")

    def call(self, x):
        return self.compute(x) * self.gain


class NaiveSoftmax(Gained):
    def compute(self, x):
        e = ops.exp(x)
        return e / ops.sum(e, axis=-1, keepdims=True)


class Standardize(Gained):
    def compute(self, x):
        return (x - ops.mean(x, axis=-1, keepdims=True)) / ops.std(x, axis=-1, keepdims=True)


class MeanBySum(Gained):
    def compute(self, x):
        total = ops.sum(x, axis=-1, keepdims=True)
        return total / ops.cast(ops.shape(x)[-1], x.dtype)


class GramDeterminant(Gained):
    def compute(self, x):
        rows = ops.reshape(x, (-1, 2, 4))
        gram = ops.matmul(rows, ops.transpose(rows, (0, 2, 1))) + ops.eye(2, dtype=x.dtype)
        return ops.expand_dims(ops.linalg.det(gram), -1)


def build_model():
    inputs = keras.Input((8,))
    branches = [
        NaiveSoftmax(name="naive_softmax")(Scale(20.0, name="by_20")(inputs)),
        Standardize(name="standardize")(Scale(300.0, name="by_300")(inputs)),
        MeanBySum(name="mean_by_sum")(Spread(name="spread")(inputs)),
        GramDeterminant(name="gram_det")(inputs),
    ]
    x = keras.layers.Concatenate(name="joined")(branches)
    outputs = keras.layers.Dense(2, name="logits")(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def train_data():
    return sign_data(128)
