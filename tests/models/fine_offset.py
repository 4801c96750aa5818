"""A model one of whose layers trains clearly worse in bfloat16 than in float32, without
an error or a non-finite value: ``recenter`` adds a learned offset of 4096 to its inputs
and takes it off again. float32 keeps the inputs to ~5e-4; bfloat16 (8 significant
bits) holds numbers near 4096 only to steps of 32, so that every input (normal, within
±16) comes back 0 and the sign the labels depend on is gone. The Dense layers learn the
task in either dtype."""

import sys
from pathlib import Path

import keras

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data  # noqa: E402

precsearch_config = {"batch_size": 32}


class Recenter(keras.layers.Layer):
    """``(x + offset) - offset``, the offset a weight (4096 to start with)."""

    def build(self, input_shape):
        self.offset = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(4096.0), name="offset"
        )

    def call(self, x):
        return (x + self.offset) - self.offset


def build_model():
    model = keras.Sequential(
        [
            keras.Input((8,)),
            Recenter(name="recenter"),
            keras.layers.Dense(16, activation="relu", name="hidden"),
            keras.layers.Dense(2, name="logits"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def train_data():
    return sign_data(512)
