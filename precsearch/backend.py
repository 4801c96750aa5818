"""What differs by Keras backend, in one place: the train call and its state, waiting for
the device, gradients of one batch, versions and GPUs, the data-parallel strategy.

Keras 3 trains on TensorFlow, JAX or PyTorch, chosen by ``KERAS_BACKEND``
(:func:`current` reads ``keras.backend.backend()``). Everything else in precsearch is
backend-neutral and goes through a :class:`Backend`:

- **The train call.** TensorFlow: ``train_function(iterator)``. JAX:
  ``train_function(state, iterator) -> (logs, state)``, the state donated, so each call
  is fed the variables' values and the new state is written back (the variables stay
  the truth: evaluation, saving and export read them as on any backend). PyTorch:
  ``train_function([batch])``.
- **Waiting for the device.** A GPU call can return before the device has finished; a
  timed call ends only after :meth:`Backend.sync` (``sync_devices`` on TensorFlow,
  ``block_until_ready`` on JAX, ``torch.cuda.synchronize``), so a block's time is the
  work's, never the queue's (``tests/test_backends.py`` catches a missing sync with an
  asynchronous fake).
- **Gradients of one batch**, for the numerics checks: ``GradientTape``, ``jax.grad``
  over ``stateless_call``, ``backward()``.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

from precsearch.errors import UserInputError, missing_module

__all__ = [
    "Backend",
    "current",
    "import_backend",
    "import_tensorflow",
    "tensorflow_if_installed",
]


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


def tensorflow_if_installed() -> Any | None:
    """TensorFlow where it is installed (quietly), else ``None``: on JAX and PyTorch it is
    optional (a ``tf.data.Dataset`` from the model file, SavedModel export)."""
    try:
        return import_tensorflow()
    except UserInputError:
        return None


def import_backend() -> Backend:
    """The backend Keras will train on, its framework imported (timed apart by the caller:
    TensorFlow's import alone takes seconds).

    Raises:
        UserInputError: The framework ``KERAS_BACKEND`` names is not installed.
    """
    name = os.environ.get("KERAS_BACKEND", "tensorflow")
    if name == "tensorflow":
        import_tensorflow()
    else:
        try:
            __import__({"jax": "jax", "torch": "torch"}.get(name, name))
        except ModuleNotFoundError as exc:
            raise missing_module(exc, f"KERAS_BACKEND={name}") from None
    return current()


class Backend:
    """The TensorFlow backend; :class:`Jax` and :class:`Torch` override what differs.

    Attributes:
        name: Keras's name for it (``tensorflow``, ``jax``, ``torch``).
        exact_rewrite: Whether TensorFlow's graph rewrite exists here (a peer).
    """

    name = "tensorflow"
    exact_rewrite = True

    @property
    def module(self) -> Any:
        """The framework's module."""
        return import_tensorflow()

    def version(self) -> str:
        return str(self.module.__version__)

    def gpus(self) -> list[dict[str, Any]]:
        """``[{name, compute_capability}]`` of the visible GPUs."""
        tf = self.module
        gpus = []
        tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        for device in tf.config.list_physical_devices("GPU"):
            details = tf.config.experimental.get_device_details(device)
            capability = list(details.get("compute_capability") or [])
            gpus.append(
                {
                    "name": details.get("device_name", device.name),
                    "compute_capability": capability,
                    "fp32_matmul": _fp32_matmul(capability, tf32),
                }
            )
        return gpus

    def reset_peak_memory(self) -> None:
        """Start the first GPU's peak-memory mark from now."""
        self.module.config.experimental.reset_memory_stats("GPU:0")

    def peak_memory_bytes(self) -> float:
        """The first GPU's peak memory since :meth:`reset_peak_memory`."""
        return float(self.module.config.experimental.get_memory_info("GPU:0")["peak"])

    def prepare(self, model: Any, batch: tuple[Any, Any]) -> None:
        """Make every variable the train function will carry (on JAX its state): the
        compiled metrics' and the optimizer's, as ``fit`` does before its first step."""

    def train_call(self, model: Any, batches: Iterator[Any]) -> dict[str, Any]:
        """One call of the model's train function on the next batch(es) of ``batches``;
        its logs. The device may still be working: :meth:`sync` waits."""
        return model.train_function(batches)

    @functools.cached_property
    def has_gpu(self) -> bool:
        return bool(self.gpus())

    def compiled(self, fn: Any) -> Any:
        """``fn`` compiled as the backend's train steps are (``tf.function``, ``jax.jit``;
        PyTorch runs it eagerly, as Keras does unless ``jit_compile`` is set)."""
        return self.module.function(fn)

    def sync(self) -> None:
        """Wait until the device has finished the work queued so far."""
        if self.has_gpu:
            self.module.test.experimental.sync_devices()

    def gradients(self, model: Any, x: Any, y: Any, scale: float) -> tuple[float, list[Any]]:
        """The loss of one batch in training mode and the gradients of ``loss * scale``
        (numpy, in the order of ``model.trainable_variables``; ``None`` where a variable
        gets none)."""
        tf = self.module
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = tf.cast(model.compute_loss(x=x, y=y, y_pred=y_pred, training=True), tf.float32)
            scaled = loss * scale
        grads = tape.gradient(scaled, model.trainable_variables)
        return float(loss), [None if g is None else _numpy(tf.convert_to_tensor(g)) for g in grads]

    def strategy(self, name: str) -> Any:
        """The data-parallel strategy ``name`` (``none`` or ``mirrored``): an object with
        ``scope()`` and ``num_replicas_in_sync``, or ``None``."""
        if name == "none":
            return None
        if name != "mirrored":
            raise UserInputError(f"--strategy {name!r}: expected none or mirrored")
        return self.mirrored()

    def mirrored(self) -> Any:
        """Data parallelism over every device: ``MirroredStrategy`` on TensorFlow."""
        tf = self.module
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy(devices=[d.name for d in devices])


class Jax(Backend):
    """Keras on JAX: the train state threaded through each call, ``jax.grad``."""

    name = "jax"
    exact_rewrite = False

    @property
    def module(self) -> Any:
        import jax

        return jax

    def gpus(self) -> list[dict[str, Any]]:
        jax = self.module
        try:
            devices = jax.devices("gpu")
        except RuntimeError:  # no GPU backend
            return []
        # jax_default_matmul_precision unset: XLA multiplies float32 in TF32 on Ampere on.
        tf32 = jax.config.jax_default_matmul_precision in (None, "default", "bfloat16_3x", "tf32")
        gpus = []
        for d in devices:
            capability = _capability(getattr(d, "compute_capability", ""))
            gpus.append(
                {
                    "name": getattr(d, "device_kind", str(d)),
                    "compute_capability": capability,
                    "fp32_matmul": _fp32_matmul(capability, tf32),
                }
            )
        return gpus

    def reset_peak_memory(self) -> None:
        # XLA's allocator keeps one peak for the process: read as the rise above now.
        self._peak_start = self.peak_memory_bytes(absolute=True)

    def peak_memory_bytes(self, absolute: bool = False) -> float:
        stats = self.module.devices("gpu")[0].memory_stats() or {}
        peak = float(stats.get("peak_bytes_in_use", 0))
        return peak if absolute else max(0.0, peak - getattr(self, "_peak_start", 0.0))

    def prepare(self, model: Any, batch: tuple[Any, Any]) -> None:
        model._symbolic_build(data_batch=batch)  # what fit() does before its first step

    def train_call(self, model: Any, batches: Iterator[Any]) -> dict[str, Any]:
        groups = _state_variables(model)
        state = tuple([v.value for v in variables] for variables in groups)
        logs, state = model.train_function(state, batches)
        # The new state goes straight back into the variables (they stay the truth for
        # evaluation, saving and the next call): the train step made these values with
        # the variables' own shapes and dtypes, so Keras's checked assign(), 4 ms a call
        # for MobileNetV2's 582 variables here, is not needed (0.75 ms with this).
        for variables, values in zip(groups, state, strict=True):
            for variable, value in zip(variables, values, strict=True):
                variable._direct_assign(value)
        self._last = (logs, state)
        return logs

    def compiled(self, fn: Any) -> Any:
        return self.module.jit(fn)

    def sync(self) -> None:
        last = getattr(self, "_last", None)
        if last is not None:
            self.module.block_until_ready(last)
            self._last = None

    def gradients(self, model: Any, x: Any, y: Any, scale: float) -> tuple[float, list[Any]]:
        jax = self.module
        import keras

        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]

        def scaled_loss(values: list[Any]) -> Any:
            y_pred, _ = model.stateless_call(values, non_trainable, x, training=True)
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred, training=True)
            loss = keras.ops.cast(loss, "float32")
            return loss * scale, loss

        (_, loss), grads = jax.value_and_grad(scaled_loss, has_aux=True)(trainable)
        return float(loss), [_numpy(g) for g in grads]

    def mirrored(self) -> Any:
        return _JaxDataParallel()


class Torch(Backend):
    """Keras on PyTorch: ``train_function([batch])``, ``backward()``."""

    name = "torch"
    exact_rewrite = False

    @property
    def module(self) -> Any:
        import torch

        return torch

    def gpus(self) -> list[dict[str, Any]]:
        torch = self.module
        if not torch.cuda.is_available():
            return []
        tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
        gpus = []
        for i in range(torch.cuda.device_count()):
            capability = list(torch.cuda.get_device_capability(i))
            gpus.append(
                {
                    "name": torch.cuda.get_device_name(i),
                    "compute_capability": capability,
                    "fp32_matmul": _fp32_matmul(capability, tf32),
                }
            )
        return gpus

    def reset_peak_memory(self) -> None:
        self.module.cuda.reset_peak_memory_stats()

    def peak_memory_bytes(self) -> float:
        return float(self.module.cuda.max_memory_allocated())

    def prepare(self, model: Any, batch: tuple[Any, Any]) -> None:
        model._symbolic_build(data_batch=batch)  # what fit() does before its first step

    def train_call(self, model: Any, batches: Iterator[Any]) -> dict[str, Any]:
        return model.train_function([next(batches)])

    def compiled(self, fn: Any) -> Any:
        return fn

    def sync(self) -> None:
        if self.has_gpu:
            self.module.cuda.synchronize()

    def gradients(self, model: Any, x: Any, y: Any, scale: float) -> tuple[float, list[Any]]:
        import keras

        model.zero_grad()
        y_pred = model(x, training=True)
        loss = keras.ops.cast(model.compute_loss(x=x, y=y, y_pred=y_pred, training=True), "float32")
        (loss * scale).backward()
        grads = [v.value.grad for v in model.trainable_variables]
        model.zero_grad()
        return float(loss), [None if g is None else _numpy(g) for g in grads]

    def mirrored(self) -> Any:
        raise UserInputError(
            "--strategy mirrored: data parallelism is not available on Keras's torch backend "
            "here (TensorFlow: MirroredStrategy; JAX: keras.distribution.DataParallel)"
        )


class _JaxDataParallel:
    """``keras.distribution.DataParallel`` over every device, with a strategy's face."""

    def __init__(self) -> None:
        import keras

        self.distribution = keras.distribution.DataParallel()
        self.num_replicas_in_sync = len(keras.distribution.list_devices())

    def scope(self) -> Any:
        return self.distribution.scope()


def _state_variables(model: Any) -> tuple[list[Any], ...]:
    """The variables of a JAX train state, in the order the train function takes them."""
    return (
        model.trainable_variables,
        model.non_trainable_variables,
        model.optimizer.variables,
        model.metrics_variables,
    )


def _fp32_matmul(capability: list[int], tf32_enabled: bool) -> str:
    """How FP32 itself multiplies on a GPU: ``tf32`` (Ampere, compute capability 8, and
    later, where the framework allows it: FP32 is faster there and a mixed-precision gain
    smaller than on older GPUs) or ``float32``."""
    return "tf32" if tf32_enabled and capability[:1] >= [8] else "float32"


def _capability(text: str) -> list[int]:
    return [int(part) for part in str(text).split(".") if part.isdigit()]


def _numpy(tensor: Any) -> Any:
    import keras
    import numpy as np

    # To numpy first: JAX has no float64 unless enabled (it would truncate to float32).
    return np.asarray(keras.ops.convert_to_numpy(tensor)).astype(np.float64).ravel()


_BACKENDS = {"tensorflow": Backend, "jax": Jax, "torch": Torch}


@functools.cache
def _make(name: str) -> Backend:
    return _BACKENDS[name]()


def current() -> Backend:
    """The backend Keras trains on in this process."""
    import keras

    name = keras.backend.backend()
    if name not in _BACKENDS:
        raise UserInputError(f"KERAS_BACKEND={name}: precsearch trains on tensorflow, jax or torch")
    return _make(name)
