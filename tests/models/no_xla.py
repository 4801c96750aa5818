"""A model XLA cannot compile on a CPU: one layer takes a determinant (TensorFlow has no
XLA kernel for it there), beside an ordinary Dense branch. Without XLA it trains in every
dtype (the determinant itself is taken in float32, which has a kernel); with XLA, the
search's probe and trials cannot run."""

import sys
from pathlib import Path

import keras
from keras import ops

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data  # noqa: E402

precsearch_config = {"batch_size": 32}


class GramDeterminant(keras.layers.Layer):
    """``gain * det(rows @ rows.T + I)`` of each example's inputs as two rows of four."""

    def build(self, input_shape):
        self.gain = self.add_weight(shape=(), initializer="ones", name="gain")

    def call(self, x):
        rows = ops.reshape(x, (-1, 2, 4))
        gram = ops.matmul(rows, ops.transpose(rows, (0, 2, 1))) + ops.eye(2, dtype=x.dtype)
        det = ops.cast(ops.linalg.det(ops.cast(gram, "float32")), x.dtype)
        return ops.expand_dims(det, -1) * self.gain


def build_model():
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(16, activation="relu", name="hidden")(inputs)
    det = GramDeterminant(name="gram_det")(inputs)
    x = keras.layers.Concatenate(name="joined")([hidden, det])
    outputs = keras.layers.Dense(2, name="logits")(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def train_data():
    return sign_data(128)
