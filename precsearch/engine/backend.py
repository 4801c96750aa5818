"""The backend the worker trains with, imported once and quietly.

Keras 3 runs on TensorFlow here; what differs by backend is to gather in this module.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from precsearch.errors import missing_module

__all__ = ["import_tensorflow"]


def import_tensorflow() -> Any:
    """TensorFlow, imported quietly; where it is not installed, one line saying how.

    Raises:
        UserInputError: TensorFlow is not installed (``pip install 'precsearch[cpu]'``).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ModuleNotFoundError as exc:
        raise missing_module(exc, "precsearch (to build and train models)") from None
    replicas = int(os.environ.get("PRECSEARCH_CPU_REPLICAS") or 0)
    if replicas > 1:
        # Several logical CPUs, to run data-parallel code without GPUs (tests): possible
        # only before TensorFlow has set its devices up.
        cpu = tf.config.list_physical_devices("CPU")[0]
        with contextlib.suppress(RuntimeError):
            config = tf.config.LogicalDeviceConfiguration
            tf.config.set_logical_device_configuration(cpu, [config() for _ in range(replicas)])
    return tf
