"""Scoring a trial: speedup and the fidelity gap to FP32, and whether it is feasible.

Definitions (also in the README):

* **Speedup** = candidate samples/s ÷ FP32 samples/s, each from the p10 of its per-step
  times in alternating blocks measured in the same process (FP32 at the model's own batch
  size, the candidate at the policy's).
* **Fidelity gap**: the training loss is smoothed as the mean over the last quarter of
  the budget. Over the FP32 reference runs (same initial weights, batch size and LR rule;
  different data-order seeds) take the mean ``m`` and the band ``b = max - min``. The gap
  is ``|candidate - m| / max(b, rel_floor * |m|)``; with validation data, the same for the
  final validation loss and metric, and the gap is the largest of these.
* **Feasible**: finite loss throughout, loss scale never below 1, at most
  ``max_skipped`` of the steps skipped for overflow, gap ≤ ``tolerance`` and, if given,
  the validation metric within ``metric_abs`` / ``metric_rel`` of FP32's mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from precsearch.records import Fidelity, Reference, TrialResult

__all__ = [
    "PENALTY_GAP",
    "Fidelity",
    "fidelity_gap",
    "is_feasible",
    "judge",
    "smoothed_tail",
]

PENALTY_GAP = 1000.0  # the fidelity objective's value for a trial with no finite gap


def smoothed_tail(losses: Sequence[float]) -> float:
    """Mean of the last quarter of a loss curve (at least one point)."""
    if not losses:
        return math.nan
    tail = losses[-max(1, len(losses) // 4) :]
    return sum(tail) / len(tail)


def _gap(value: float | None, refs: Sequence[float | None], rel_floor: float) -> float | None:
    values = [v for v in refs if v is not None and math.isfinite(v)]
    if value is None or not values:
        return None
    if not math.isfinite(value):
        return math.inf
    mean = sum(values) / len(values)
    unit = max(max(values) - min(values), rel_floor * abs(mean), 1e-12)
    return abs(value - mean) / unit


def fidelity_gap(result: TrialResult, reference: Reference, fidelity: Fidelity) -> float:
    """The candidate's distance from FP32 in units of the FP32 band (see module doc)."""
    gaps = [
        _gap(
            smoothed_tail(result.curve["loss"]),
            [smoothed_tail(c) for c in reference.curves],
            fidelity.rel_floor,
        ),
        _gap(result.val.get("loss"), reference.val_loss, fidelity.rel_floor),
        _gap(result.val.get("metric"), reference.val_metric, fidelity.rel_floor),
    ]
    known = [g for g in gaps if g is not None]
    return max(known) if known else math.inf


def judge(result: TrialResult, reference: Reference, fidelity: Fidelity) -> tuple[str, str, float]:
    """Status (``ok`` or ``infeasible``), reason and gap of a trial that ran to the end."""
    numerics = result.numerics
    if numerics.get("nonfinite_step") is not None:
        return "infeasible", f"non-finite loss at step {numerics['nonfinite_step']}", math.inf
    min_scale = numerics.get("min_loss_scale")
    if min_scale is not None and min_scale < 1:
        return "infeasible", f"loss scale collapsed to {min_scale:g}", math.inf
    share = numerics.get("skipped_share") or 0.0
    gap = fidelity_gap(result, reference, fidelity)
    if share > fidelity.max_skipped:
        return "infeasible", f"{share:.0%} of steps skipped for overflow", gap
    if gap > fidelity.tolerance:
        return "infeasible", f"fidelity gap {gap:.2f} > tolerance {fidelity.tolerance:g}", gap
    metric = result.val.get("metric")
    refs = [v for v in reference.val_metric if v is not None]
    if metric is not None and refs and (fidelity.metric_abs or fidelity.metric_rel):
        mean = sum(refs) / len(refs)
        allowed = max(fidelity.metric_abs or 0.0, (fidelity.metric_rel or 0.0) * abs(mean))
        if abs(metric - mean) > allowed:
            return (
                "infeasible",
                f"val {result.val.get('metric_name')} {metric:.4g} vs FP32 {mean:.4g}",
                gap,
            )
    return "ok", "", gap


def is_feasible(trial: Any) -> bool:
    """Whether a finished Optuna trial met every constraint (≤ 0) it was given."""
    constraints = trial.constraints or {}
    return bool(constraints) and all(value <= 0 for value in constraints.values())
