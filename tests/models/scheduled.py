"""The tiny test MLP with a learning-rate schedule: a policy's batch size must scale it."""

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data, tiny_model  # noqa: E402

precsearch_config = {"batch_size": 32}

INITIAL_LR = 1e-3


def build_model():
    return tiny_model(compiled=False)


def compile_kwargs():
    import keras

    schedule = keras.optimizers.schedules.ExponentialDecay(INITIAL_LR, 100, 0.5)
    return {
        "optimizer": keras.optimizers.Adam(schedule),
        "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    }


def train_data():
    return sign_data(512)
