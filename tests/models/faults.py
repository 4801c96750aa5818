"""A tiny MLP whose fault layers each misbehave one way when they compute in low precision.

Every fault layer passes its input through in float32; in bfloat16 or float16 (the one
named ``overflow``: float16 only) it fails as its name says, while the step is traced,
as real crashes in kernels and tracing do:

nan         returns NaN (an infeasible trial, not a crash)
overflow    multiplies by 1e5, past float16's largest value (infeasible)
abort       the process dies with SIGABRT
segfault    the process reads address 0 (SIGSEGV)
hang        sleeps forever (the trial's timeout ends it)
memory      allocates 256 TiB (a real MemoryError)
bf16_death  the process is SIGKILLed when it sees a bfloat16 tensor, whose dtype prints
            as ``<dtype: 'bfloat16'>``
"""

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

import keras
import numpy as np

TESTS = str(Path(__file__).resolve().parents[1])  # the shared scaffold, tests/helpers.py
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from helpers import sign_data, tiny_model  # noqa: E402

precsearch_config = {"batch_size": 32}
FAULTS = ("nan", "overflow", "abort", "segfault", "hang", "memory", "bf16_death")


class Fault(keras.layers.Layer):
    def call(self, x):
        fault, dtype = self.name, self.compute_dtype
        if dtype == "float32" or (fault == "overflow" and dtype != "float16"):
            return x
        if fault == "nan":
            return x + keras.ops.cast(float("nan"), x.dtype)
        if fault == "overflow":
            return x * keras.ops.cast(1e5, x.dtype) + keras.ops.cast(1e5, x.dtype)
        if fault == "abort":
            os.abort()
        if fault == "segfault":
            ctypes.string_at(0)
        if fault == "hang":
            time.sleep(10**6)
        if fault == "memory":
            np.ones(2**45)
        if fault == "bf16_death" and str(x.dtype) == "<dtype: 'bfloat16'>":
            os.kill(os.getpid(), signal.SIGKILL)
        return x


def build_model():
    return tiny_model(
        keras.layers.Dense(16, activation="relu", name="hidden"),
        *[Fault(name=fault) for fault in FAULTS],
        keras.layers.Dense(2, name="logits"),
    )


def train_data():
    return sign_data(256)
