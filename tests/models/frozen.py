"""An MLP that cannot learn (learning rate 0) and has no validation data: nothing in its
FP32 training moves, so nothing can tell a candidate from FP32."""

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data, tiny_model  # noqa: E402

precsearch_config = {"batch_size": 32}


def build_model():
    import keras

    return tiny_model(optimizer=keras.optimizers.SGD(learning_rate=0.0))


def train_data():
    return sign_data(256)
