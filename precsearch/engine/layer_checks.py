"""The classic low-precision pitfalls, found layer by layer on one batch.

Besides float inputs that carry integer ids (:mod:`precsearch.engine.inputs`), the known
ways a layer breaks in low precision show on one batch. Each floating layer of a float32
model (not a nested model: its layers are checked themselves) keeps the inputs it is
called with on one batch; then it runs again alone on them with its own dtype policy
switched to ``mixed_<dtype>`` (its sublayers as they are), each low dtype in turn, and
is timed against float32 there. A finding per layer and dtype, the first that holds:

* ``overflow``: its float32 activations exceed float16's largest value (65504): they
  are infinite in float16;
* ``error``: it raises in the low dtype: no kernel for what it computes there (a
  determinant has none in float16 or bfloat16 on TensorFlow's CPUs);
* ``exp``, ``square``, ``sum``: its output is finite and within range in float32, but
  not in float16, or more than :data:`LOST` off float32's (a variance that overflows to
  inf divides to zeros): something inside it overflows; which, is read from its inputs:
  an exp overflows float16 above ``log(65504)`` (~11.09: a softmax or log-sum-exp
  written out), a square above 256 (variance, norms), a sum of magnitudes above 65504
  (the largest example's is said); ``inexact`` where none of these holds (or in
  bfloat16, whose range is float32's);
* ``slow``: its low-precision forward pass is at least :data:`SLOWER` times float32's
  here: no fast kernel for it on this machine.

Backend-neutral: ``keras.ops`` and numpy only; runs eagerly, outside any timed step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from precsearch.errors import UserInputError, one_line

__all__ = ["EXP_LIMIT", "SLOWER", "layer_pitfalls"]

FLOAT16_MAX = 65504.0  # as precsearch.policy.numerics.FLOAT16_MAX
EXP_LIMIT = math.log(FLOAT16_MAX)  # exp overflows float16 above this (~11.09)
SQUARE_LIMIT = 256.0  # 256 ** 2 = 65536 > 65504
SLOWER = 10.0  # a low-precision forward pass this many times slower: no fast kernel
MIN_SECONDS = 1e-3  # slower by less than this is not worth a line
REPEATS = 2
# What an error says when TensorFlow has no kernel for an op in a dtype here.
NO_KERNEL = ("Could not find device", "not in the list of allowed values", "No registered",
             "requires tf.float32")  # fmt: skip
LOST = 0.25  # a layer's output this far from float32's (relative) lost what it computes


def _floats(tree: Any) -> list[Any]:
    """The floating tensors in ``tree``, as float32 numpy arrays."""
    import keras

    out = []
    for leaf in keras.tree.flatten(tree):
        if keras.ops.is_tensor(leaf) and keras.backend.is_float_dtype(leaf.dtype):
            out.append(np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(leaf, "float32"))))
    return out


def _captured(model: Any, x: Any) -> list[tuple[Any, str, Any, Any]]:
    """``(layer, id, (args, kwargs))`` of each floating layer's first call on ``x`` in
    float32."""
    from precsearch.policy.layers import iter_layers

    calls: dict[str, tuple[Any, Any]] = {}
    layers = [(layer, record.id) for record, layer in iter_layers(model)
              if record.floating and not record.is_model]  # fmt: skip
    for layer, layer_id in layers:

        def call(*args: Any, _id: str = layer_id, _call: Any = layer.call, **kwargs: Any) -> Any:
            calls.setdefault(_id, (args, kwargs))
            return _call(*args, **kwargs)

        layer.call = call
    try:
        model(x, training=False)
    finally:
        for layer, _ in layers:
            del layer.call
    return [(layer, i, calls[i]) for layer, i in layers if i in calls]


def _timed(
    layer: Any, args: Any, kwargs: Any, clock: Callable[[], float]
) -> tuple[list[Any], list[Any], float]:
    """The layer's outputs on ``args`` on its first and last call, and the fastest of a
    few calls after the first."""
    first = _floats(layer(*args, **kwargs))
    best, last = math.inf, None
    for _ in range(REPEATS):
        start = clock()
        last = layer(*args, **kwargs)
        best = min(best, clock() - start)
    return first, _floats(last), best


def _relative(low: list[Any], fp32: list[Any]) -> float:
    """How far the low dtype's outputs are from float32's: ``|low - fp32| / |fp32|``."""
    diff = math.sqrt(sum(float(np.sum((a - b) ** 2)) for a, b in zip(low, fp32, strict=True)))
    norm = math.sqrt(sum(float(np.sum(b**2)) for b in fp32))
    return diff / norm if norm > 0 else diff


def _internal(dtype: str, inputs: list[Any], what: str) -> tuple[str, str]:
    """What overflows inside a layer whose output in ``dtype`` is ``what`` (non-finite,
    or far from float32's), read from its inputs (module doc)."""
    top = max((float(np.max(np.abs(a), initial=0.0)) for a in inputs), default=0.0)
    high = max((float(np.max(a, initial=0.0)) for a in inputs), default=0.0)
    first = next((a for a in inputs if a.ndim >= 1), np.zeros((1, 1)))
    per_example = np.abs(first).reshape(first.shape[0], -1) if first.ndim > 1 else np.abs(first)
    total = float(per_example.sum(axis=-1).max(initial=0.0))
    if dtype == "float16" and top > SQUARE_LIMIT:
        return "square", (
            f"its output is {what}: squares of its inputs (up to {top:.3g}) overflow float16 "
            f"above {SQUARE_LIMIT:.0f} (a variance, a norm)"
        )
    if dtype == "float16" and high > EXP_LIMIT:
        return "exp", (
            f"its output is {what}: exp of its inputs (up to {high:.3g}) overflows float16 "
            f"above {EXP_LIMIT:.2f} (a softmax or log-sum-exp written out)"
        )
    if dtype == "float16" and total > FLOAT16_MAX:
        return "sum", (
            f"its output is {what}: a sum over its inputs overflows float16 "
            f"({per_example.shape[-1]} elements an example, magnitudes summing to {total:.3g})"
        )
    return "inexact", f"its output is {what}"


def _in_dtype(layer: Any, dtype: str) -> Any:
    """A context in which ``layer`` and its sublayers compute in ``dtype`` (all of it
    alone in low precision: a block's own ops and its layers' agree)."""
    import contextlib

    @contextlib.contextmanager
    def switched() -> Any:
        layers = [layer, *getattr(layer, "_flatten_layers", lambda **_: [])(include_self=False)]
        originals = [(each, each.dtype_policy) for each in layers]
        try:
            for each in layers:
                each.dtype_policy = f"mixed_{dtype}"
            yield
        finally:
            for each, policy in originals:
                each.dtype_policy = policy

    return switched()


def _finding(layer: Any, data: tuple[Any, Any], fp32: dict[str, Any], dtype: str,
             clock: Callable[[], float]) -> dict[str, Any] | None:  # fmt: skip
    """The first pitfall (module doc) of one layer in ``dtype``, or ``None``; ``fp32``:
    its float32 ``inputs``, ``outputs``, ``seconds`` and whether it is ``random``."""
    args, kwargs = data
    inputs, top = fp32["inputs"], fp32["top"]
    if dtype == "float16" and max((float(np.abs(a).max(initial=0.0)) for a in inputs),
                                  default=0.0) > FLOAT16_MAX:  # fmt: skip
        return None  # its inputs overflow already: the layer before is the finding
    if dtype == "float16" and top > FLOAT16_MAX:
        return {"kind": "overflow", "says": f"its float32 activations reach {top:.3g}, beyond "
                "float16's 65504: infinite in float16"}  # fmt: skip
    try:
        with _in_dtype(layer, dtype):
            low, _, seconds = _timed(layer, args, kwargs, clock)
    except UserInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a layer that raises in a dtype is a finding
        text = one_line(exc, limit=200)
        kernel = any(words in text for words in NO_KERNEL)
        return {"kind": "error", "says": f"it raises in {dtype} ({text})"
                + (": no kernel for what it computes there" if kernel else "")}  # fmt: skip
    if any(not np.isfinite(a).all() for a in low):
        kind, says = _internal(dtype, inputs, f"non-finite in {dtype}, finite in float32")
        return {"kind": kind, "says": says}
    # A layer that draws random numbers differs from itself: its error says nothing.
    error = 0.0 if fp32["random"] else _relative(low, fp32["outputs"])
    if error > LOST:
        kind, says = _internal(dtype, inputs, f"{error:.0%} off float32's in {dtype}")
        return {"kind": kind, "says": says}
    if seconds >= SLOWER * fp32["seconds"] and seconds - fp32["seconds"] >= MIN_SECONDS:
        times = seconds / fp32["seconds"]
        return {"kind": "slow", "says": f"its forward pass is {times:.0f}x slower in {dtype} "
                "than in float32 here: no fast kernel on this machine"}  # fmt: skip
    return None


def _float32_figures(layer: Any, data: tuple[Any, Any], clock: Callable[[], float]) -> Any:
    """The layer's float32 figures for :func:`_finding` (``None`` where they are not
    finite, or it fails again: nothing for low precision to answer for)."""
    args, kwargs = data
    inputs = _floats(args)
    try:
        first, last, seconds = _timed(layer, args, kwargs, clock)
    except Exception:  # noqa: BLE001 - it ran in the model: a second call is not the user's
        return None
    if any(not np.isfinite(a).all() for a in first + last + inputs):
        return None
    top = max((float(np.max(np.abs(a), initial=0.0)) for a in first), default=0.0)
    random = _relative(last, first) >= LOST / 10
    return {"inputs": inputs, "outputs": first, "top": top, "seconds": seconds, "random": random}


def layer_pitfalls(
    model: Any,
    x: Any,
    dtypes: tuple[str, ...] = ("float16", "bfloat16"),
    clock: Callable[[], float] = time.perf_counter,
) -> list[dict[str, Any]]:
    """The pitfalls of ``model``'s layers on the batch ``x`` (see the module doc), the
    model computing in float32: ``{layer, class, dtype, kind, line}`` per finding, the
    line for people (the layer's name, what happens, what to do).

    Args:
        model: A built Keras model in float32.
        x: One batch of its inputs.
        dtypes: The low dtypes to check.
        clock: Seconds, for the speed check (injected by tests).
    """
    found = []
    for layer, layer_id, data in _captured(model, x):
        fp32 = _float32_figures(layer, data, clock)
        for dtype in dtypes if fp32 is not None else ():
            finding = _finding(layer, data, fp32, dtype, clock)
            if finding is None:
                continue
            keep = "keep it float32" + (" (or bfloat16)" if dtype == "float16" else "")
            keep = keep if finding["kind"] != "slow" else f"leave it out of {dtype} here"
            line = f"{layer_id} ({type(layer).__name__}) in {dtype}: {finding['says']}; {keep}"
            found.append({"layer": layer_id, "class": type(layer).__name__, "dtype": dtype,
                          "kind": finding["kind"], "line": line})  # fmt: skip
    return found
