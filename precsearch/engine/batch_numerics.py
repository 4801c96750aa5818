"""One batch's numbers under each policy against FP32's: the numerics half of the probes.

Before a search, :mod:`precsearch.study.probe` asks, per layer group and low dtype, what
that group alone in low precision does to the model's numbers: the same first training
batch (at most 64 examples), from the same initial weights and the same seed, through
the policy's model and through FP32's, forward and backward. Per policy: the relative
error of the loss and of the whole gradient (the vector of every trainable variable's
gradient; under loss scaling the scaled loss is differentiated and unscaled, as the
optimizer sees it, at the scale dynamic loss scaling reaches on that batch), and the
largest activation with the layer that holds it, against
float16's limit (65504); and the classic pitfalls of the layers the policy puts in a low
dtype (:func:`precsearch.engine.layer_checks.layer_pitfalls`: found once per model and
process, each layer alone), one line each. Runs eagerly, outside any timed step; the
speed half is the confirmation's own measuring (:mod:`precsearch.engine.measure`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from precsearch.engine.guarded import classify
from precsearch.engine.layer_checks import layer_pitfalls
from precsearch.errors import UserInputError
from precsearch.policy import Policy

if TYPE_CHECKING:
    from precsearch.engine.problem import Problem

__all__ = ["batch_numerics"]

PROBE_BATCH = 64
# Each model's layer pitfalls, found once in this process (they do not depend on a policy).
_PITFALLS: weakref.WeakKeyDictionary[Any, list[dict[str, Any]]] = weakref.WeakKeyDictionary()


def _loss_and_gradient(model: Any, x: Any, y: Any, seed: int) -> tuple[float, Any]:
    """The loss and the flat float64 gradient of one training batch (unscaled).

    Under dynamic loss scaling, at the scale the optimizer would reach on this batch: a
    scaled gradient that overflows at the initial scale (2**15 by default) is no pitfall,
    the optimizer skips that step and halves the scale. So the first of the halved
    scales at which the gradient is finite is found (bisecting the halvings, down to 1:
    below it the scale has collapsed, as the guard says in training); non-finite even
    there, it is reported at the initial scale. (The tiny attention model of
    ``benchmarks/gpu`` overflowed at 2**15 and was finite at 2**8: read at 2**15 alone,
    its attention was pinned float32.)
    """
    import keras
    import numpy as np

    from precsearch.backend import current
    from precsearch.policy.layers import scalar

    optimizer = model.optimizer
    variables = model.trainable_variables

    def at(scale: float) -> tuple[float, Any]:
        keras.utils.set_random_seed(seed)  # the same dropout masks on both sides
        loss, grads = current().gradients(model, x, y, scale)
        flat = [
            np.zeros(int(np.prod(v.shape))) if g is None else np.ravel(g) / scale
            for v, g in zip(variables, grads, strict=True)
        ]
        return loss, np.concatenate(flat) if flat else np.zeros(0)

    if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return at(1.0)
    initial = scalar(optimizer.dynamic_scale)
    first = at(initial)
    if np.isfinite(first[1]).all():
        return first
    # The scale after k skipped steps is initial / 2**k; below 1 it has collapsed (as
    # the guard says in training: precsearch.policy.numerics).
    most = int(np.floor(np.log2(initial)))
    if most < 1:
        return first
    found = at(initial / 2.0**most)
    if not np.isfinite(found[1]).all():
        return first
    broken, fine = 0, most
    while fine - broken > 1:
        middle = (broken + fine) // 2
        numbers = at(initial / 2.0**middle)
        if np.isfinite(numbers[1]).all():
            fine, found = middle, numbers
        else:
            broken = middle
    return found


def _relative(a: Any, b: Any) -> float | None:
    """``|a - b| / |b|`` (norms for vectors); ``None`` where ``a`` is not finite (the
    replies are JSON, which has no infinity)."""
    import numpy as np

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not np.isfinite(a).all():
        return None
    norm = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / norm if norm > 0 else float(np.linalg.norm(a))


def batch_numerics(
    problem: Problem, configs: list[tuple[str, Policy]]
) -> dict[str, dict[str, Any]]:
    """Per label: ``loss_error`` and ``gradient_error`` (relative, against FP32; ``None``
    when not finite), ``max_activation`` and the ``layer`` that holds it, and
    ``problem`` (non-finite values, or activations near float16's limit: empty when
    none); for a policy whose batch raises, ``error`` (the reason, as a failed trial's)
    and ``detail`` instead: one policy that breaks is a finding about it, not a failure
    of the others; and for every policy ``pitfalls``, a line per classic pitfall of a
    layer it puts in a low dtype.

    Args:
        problem: The model and data.
        configs: ``(label, policy)`` pairs.
    """
    x, y = problem.first_batch(min(problem.batch_size, PROBE_BATCH))
    fp32_model = problem.model_for(problem.baseline(), seed=0)
    fp32 = _loss_and_gradient(fp32_model, x, y, seed=0)
    if problem not in _PITFALLS:
        _PITFALLS[problem] = layer_pitfalls(fp32_model, x)
    out = {}
    for label, given in configs:
        model = None
        try:
            model = problem.model_for(problem.normalise(given), seed=0)
            out[label] = _against_fp32(model, (x, y), fp32)
        except UserInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - each policy is a trial of its own here
            reason, detail = classify(exc)
            out[label] = {"error": reason, "detail": detail[-1000:]}
        out[label]["pitfalls"] = _pitfalls_in(model, _PITFALLS[problem])
    return out


def _pitfalls_in(model: Any, pitfalls: list[dict[str, Any]]) -> list[str]:
    """The lines of ``pitfalls`` whose layer ``model`` computes in their dtype."""
    from precsearch.policy.layers import iter_layers

    layers = iter_layers(model) if model is not None else []
    dtypes = {record.id: layer.dtype_policy.compute_dtype for record, layer in layers}
    return [f["line"] for f in pitfalls if dtypes.get(f["layer"]) == f["dtype"]]


def _against_fp32(model: Any, data: tuple[Any, Any], fp32: tuple[float, Any]) -> dict[str, Any]:
    """One policy's model's numbers on the batch against FP32's (see
    :func:`batch_numerics`)."""
    from precsearch.policy.numerics import probe

    x, y = data
    loss, grad = _loss_and_gradient(model, x, y, seed=0)
    rows = probe(model, (x, y))
    top = max(rows, key=lambda r: r["max_activation"], default=None)
    bad = next((r for r in rows if r["problem"]), None)
    return {
        "loss_error": _relative(loss, fp32[0]),
        "gradient_error": _relative(grad, fp32[1]),
        "max_activation": top["max_activation"] if top else 0.0,
        "layer": top["layer"] if top else "",
        "problem": f"{bad['layer']}: {bad['problem']}" if bad else "",
    }
