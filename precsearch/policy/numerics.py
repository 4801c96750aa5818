"""The numerics guard: a policy found on short trials, kept safe in a run of hours.

:class:`PolicyGuard` is a Keras callback (``policy.callbacks()`` makes one) that does the
usual ``tf.debugging.check_numerics`` advice cheaply: one finiteness flag and one global
gradient norm, computed inside the compiled step by a thin wrapper around the
optimizer's ``apply_gradients`` (callbacks never see gradients), read after each batch.
It stops training, within the step that went wrong, on

* a non-finite loss;
* non-finite gradients without loss scaling (with loss scaling they are the expected
  overflow that skips a step and halves the scale);
* a dynamic loss scale that collapsed below 1;
* more than ``max_skipped`` of the last ``window`` steps skipped for overflow;

with a message naming the likely layers: the first ones, in model order, whose weights
went non-finite, and with probe data the layers whose activations or gradients leave the
range of their dtype (:func:`probe`, also used by ``precsearch doctor``). With a
``log_dir`` it writes the loss scale, skipped steps and gradient norm to TensorBoard, in
an event file it closes when training ends.

On JAX and PyTorch the optimizer's step is not ``apply_gradients`` (Keras's JAX trainer
applies gradients statelessly inside its compiled step): there the guard watches the
loss and the loss scale, the gradient checks and the TensorBoard scalars are
TensorFlow's, and :func:`probe` reads activations (gradients on TensorFlow only).
"""

from __future__ import annotations

import math
import os
from collections import deque
from typing import Any

import keras
import numpy as np

from precsearch.backend import current
from precsearch.errors import PrecsearchError
from precsearch.policy.layers import iter_layers, scalar

__all__ = [
    "FLOAT16_MAX",
    "FLOAT16_TINY",
    "NumericsError",
    "PolicyGuard",
    "gradient_norms",
    "probe",
]

FLOAT16_MAX = 65504.0
FLOAT16_TINY = 6e-8  # the smallest float16 subnormal, about


class NumericsError(PrecsearchError):
    """Training under a policy went numerically wrong and the guard stopped it."""


class PolicyGuard(keras.callbacks.Callback):
    """Stops a training run whose numerics go wrong, saying where (see the module doc).

    Args:
        policy: The policy the model trains under (for the message), or ``None``.
        max_skipped: Largest share of recent steps skipped for overflow.
        window: How many recent steps that share is taken over.
        log_dir: Where TensorBoard scalars go (none when ``None``).
        probe_data: One batch ``(x, y)``; with it the message names layers by the
            range of their activations and gradients, not only by broken weights.
        raise_error: Raise :class:`NumericsError` when stopping (else only stop, and
            keep the reason in :attr:`stopped`).

    Attributes:
        stopped: Why training was stopped (``""`` while it was not).
        step: Steps seen.
    """

    def __init__(
        self,
        policy: Any = None,
        max_skipped: float = 0.2,
        window: int = 100,
        log_dir: str | os.PathLike[str] | None = None,
        probe_data: Any = None,
        raise_error: bool = False,
    ) -> None:
        super().__init__()
        self.policy = policy
        self.max_skipped = max_skipped
        self.window = window
        self.probe_data = probe_data
        self.raise_error = raise_error
        self.stopped = ""
        self.step = 0
        self._skips: deque[bool] = deque(maxlen=window)
        self._scale: float | None = None
        self._log_dir = str(log_dir) if log_dir else None
        self._writer: Any = None  # open from the start to the end of each training run
        self._tf = _tensorflow_backend()
        self._finite = self._norm = None
        if self._tf is not None:
            self._finite = self._tf.Variable(True, trainable=False, name="guard_grads_finite")
            self._norm = self._tf.Variable(0.0, trainable=False, name="guard_grad_norm")

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        optimizer = model.optimizer
        tf = self._tf
        if tf is None or optimizer is None or getattr(optimizer, "_precsearch_guard", None) is self:
            return
        original = optimizer.apply_gradients
        finite, norm = self._finite, self._norm
        scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

        def apply_gradients(grads_and_vars: Any) -> Any:
            pairs = list(grads_and_vars)
            grads = [g for g, _ in pairs if g is not None]
            if grads:
                ok = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
                finite.assign(ok)
                norm.assign(tf.cast(tf.linalg.global_norm(grads), norm.dtype))
                if not scaled:
                    # A loss-scale optimizer skips such a step itself; without one the
                    # step is left out here (zero gradients), so that the weights stay
                    # finite for the last checkpoint and for the probe of the layers.
                    pairs = [
                        (None if g is None else tf.where(ok, g, tf.zeros_like(g)), v)
                        for g, v in pairs
                    ]
            return original(pairs)

        optimizer.apply_gradients = apply_gradients
        optimizer._precsearch_guard = self
        model.train_function = None  # retrace with the check inside the step

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self._tf is not None and self._log_dir is not None and self._writer is None:
            self._writer = self._tf.summary.create_file_writer(self._log_dir)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._close_writer()

    def _close_writer(self) -> None:
        # Closing releases the event file; the next run opens a new one.
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _loss_scale(self) -> float | None:
        optimizer = self.model.optimizer
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            return scalar(optimizer.dynamic_scale)
        return None

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.step += 1
        loss = float((logs or {}).get("loss", 0.0))
        scale = self._loss_scale()
        skipped = scale is not None and self._scale is not None and scale < self._scale
        self._scale = scale
        self._skips.append(skipped)
        norm = float(self._norm.numpy()) if self._norm is not None else math.nan
        if scale:
            norm /= scale
        if self._writer is not None:
            tf = self._tf
            with self._writer.as_default(step=self.step):
                tf.summary.scalar("guard/gradient_norm", norm)
                tf.summary.scalar("guard/skipped_steps", float(sum(self._skips)))
                if scale is not None:
                    tf.summary.scalar("guard/loss_scale", scale)
        reason = ""
        if not math.isfinite(loss):
            reason = f"the loss became {loss} at step {self.step}"
        elif scale is None and self._finite is not None and not bool(self._finite.numpy()):
            reason = f"the gradients became non-finite at step {self.step}"
        elif scale is not None and scale < 1:
            reason = f"the loss scale collapsed to {scale:g} at step {self.step}"
        elif len(self._skips) == self.window and sum(self._skips) > self.max_skipped * self.window:
            share = sum(self._skips) / self.window
            reason = (
                f"{share:.0%} of the last {self.window} steps were skipped for overflow "
                f"(at step {self.step})"
            )
        if reason:
            self._stop(reason)

    def _stop(self, reason: str) -> None:
        layers = self._likely_layers()
        message = f"precsearch guard stopped training: {reason}"
        if self.policy is not None:
            message += f" under policy default {self.policy.default!r}"
        if layers:
            message += f"; likely layers: {', '.join(layers[:5])}"
        message += (
            "; keep those layers float32 (policy 'layers'), or use dynamic loss scaling for float16"
        )
        self.stopped = message
        self.model.stop_training = True
        if self._writer is not None:
            self._writer.flush()
        if self.raise_error:
            self._close_writer()  # the error skips on_train_end
            raise NumericsError(message)

    def _likely_layers(self) -> list[str]:
        found = []
        if self.probe_data is not None:
            rows = probe(self.model, self.probe_data)
            # The layers after the first non-finite output follow it, and the gradients
            # of those before the last non-finite gradient: name where it starts.
            first = next((r["layer"] for r in rows if r["nonfinite_activation"]), None)
            first = first or next((r["layer"] for r in rows[::-1] if r["nonfinite"]), None)
            found = [r["layer"] for r in rows if r["problem"] and not r["nonfinite"]]
            found = ([first] if first else []) + found
        for record, layer in iter_layers(self.model):
            if record.is_model or record.id in found:
                continue
            if any(not np.isfinite(w).all() for w in layer.get_weights()):
                found.append(record.id)
        return found


def gradient_norms(model: Any, data: tuple[Any, Any]) -> dict[str, float]:
    """The gradient's norm on one batch, as the optimizer would get it: ``global`` and
    one per layer that has trainable weights (by layer id).

    Under dynamic loss scaling the scaled loss is differentiated and the gradients
    unscaled, so that a float16 underflow shows as the zeros the optimizer would see.
    Runs eagerly, outside any timed step.
    """
    x, y = data
    variables = model.trainable_variables
    optimizer = model.optimizer
    scale = 1.0
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        scale = scalar(optimizer.dynamic_scale)
    _, grads = current().gradients(model, x, y, scale)
    by_variable = {
        id(v): float(np.sqrt(np.sum(np.square(g)))) / scale
        for v, g in zip(variables, grads, strict=True)
        if g is not None
    }
    norms = {"global": math.sqrt(sum(n * n for n in by_variable.values()))}
    for record, layer in iter_layers(model):
        weights = [by_variable[id(v)] for v in layer.trainable_weights if id(v) in by_variable]
        if weights and not record.is_model:
            norms[record.id] = math.sqrt(sum(n * n for n in weights))
    return norms


def probe(model: Any, data: tuple[Any, Any]) -> list[dict[str, Any]]:
    """One training batch through ``model`` as it is; per layer: dtype, largest
    activation and gradient, smallest non-zero gradient, and what is wrong, if anything.

    Runs eagerly, each layer's ``call`` wrapped for the duration to keep its output.
    """
    x, y = data
    outputs: dict[str, Any] = {}
    patched = []
    for record, layer in iter_layers(model):
        if record.is_model or not record.floating:
            continue
        original = layer.call

        def call(*args: Any, _id: str = record.id, _call: Any = original, **kwargs: Any) -> Any:
            out = _call(*args, **kwargs)
            if keras.ops.is_tensor(out) and "float" in keras.backend.standardize_dtype(out.dtype):
                outputs[_id] = out
            return out

        layer.call = call
        patched.append((layer, record))
    tf = _tensorflow_backend()
    try:
        if tf is not None:
            with tf.GradientTape() as tape:
                y_pred = model(x, training=True)
                loss = model.compute_loss(x=x, y=y, y_pred=y_pred, training=True)
            ids = list(outputs)
            grads = tape.gradient(loss, [outputs[i] for i in ids])
        else:  # activations only: an output's gradient needs TensorFlow's tape
            model(x, training=True)
            ids = list(outputs)
            grads = [None] * len(ids)
    finally:
        for layer, _ in patched:
            del layer.call
    rows = []
    classes = {record.id: type(layer).__name__ for layer, record in patched}
    for layer_id, grad in zip(ids, grads, strict=True):
        act = np.abs(_float32(outputs[layer_id]))
        g = np.abs(_float32(grad)) if grad is not None else None
        nonzero = g[(g > 0) & np.isfinite(g)] if g is not None else np.array([])
        row = {
            "layer": layer_id,
            "class": classes[layer_id],
            "dtype": keras.backend.standardize_dtype(outputs[layer_id].dtype),
            "max_activation": float(np.max(act, initial=0.0, where=np.isfinite(act))),
            "max_gradient": float(np.max(g, initial=0.0, where=np.isfinite(g)))
            if g is not None
            else None,
            "min_gradient": float(nonzero.min()) if nonzero.size else None,
            "nonfinite_activation": bool(not np.isfinite(act).all()),
            "nonfinite": bool(
                not np.isfinite(act).all() or (g is not None and not np.isfinite(g).all())
            ),
        }
        row["problem"] = _problem(row)
        rows.append(row)
    return rows


def _tensorflow_backend() -> Any | None:
    """TensorFlow when Keras trains on it, else ``None``."""
    backend = current()
    return backend.module if backend.name == "tensorflow" else None


def _float32(tensor: Any) -> Any:
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(tensor, "float32")))


def _problem(row: dict[str, Any]) -> str:
    if row["nonfinite"]:
        return f"non-finite values in {row['dtype']}"
    if row["dtype"] == "float16" and row["max_activation"] >= FLOAT16_MAX / 2:
        return f"activations near float16's limit ({row['max_activation']:.3g} of 65504)"
    return ""
