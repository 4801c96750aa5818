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
    "Fidelity",
    "fidelity_gap",
    "judge",
    "precision_gap",
    "time_to_quality",
    "window_mean",
]


def window_mean(samples: Sequence[int], losses: Sequence[float], end: int) -> float:
    """The smoothed loss at ``end`` samples: the mean of the points in the last quarter
    of the budget (``0.75 * end < samples <= end``), or the last point at or before
    ``end`` where a curve is too coarse to have one there."""
    points = [(s, loss) for s, loss in zip(samples, losses, strict=False) if s <= end]
    if not points:
        return math.nan
    tail = [loss for s, loss in points if s > 0.75 * end]
    return sum(tail) / len(tail) if tail else points[-1][1]


def _band(refs: Sequence[float | None], rel_floor: float) -> tuple[float, float] | None:
    """(mean, unit) of FP32 figures: the unit is their spread, at least ``rel_floor``
    of the mean, so that seeds which happen to agree do not make everything infeasible."""
    values = [v for v in refs if v is not None and math.isfinite(v)]
    if not values:
        return None
    mean = sum(values) / len(values)
    return mean, max(max(values) - min(values), rel_floor * abs(mean), 1e-12)


def _gap(value: float | None, refs: Sequence[float | None], rel_floor: float) -> float | None:
    band = _band(refs, rel_floor)
    if value is None or band is None:
        return None
    if not math.isfinite(value):
        return math.inf
    return abs(value - band[0]) / band[1]


def _tails(reference: Reference) -> list[float]:
    samples, end = reference.samples(), reference.span()
    return [window_mean(samples, curve, end) for curve in reference.curves]


def _tail(result: TrialResult, end: int) -> float:
    return window_mean(result.curve.get("samples", []), result.curve["loss"], end)


def fidelity_gap(result: TrialResult, reference: Reference, fidelity: Fidelity) -> float:
    """The candidate's distance from FP32 at equal samples, in units of the FP32 band
    (see the module doc)."""
    gaps = [
        _gap(_tail(result, reference.span()), _tails(reference), fidelity.rel_floor),
        _gap(result.val.get("loss"), reference.val_loss, fidelity.rel_floor),
        _gap(result.val.get("metric"), reference.val_metric, fidelity.rel_floor),
    ]
    known = [g for g in gaps if g is not None]
    return max(known) if known else math.inf


def precision_gap(
    result: TrialResult, same: Reference, reference: Reference, fidelity: Fidelity
) -> float | None:
    """The candidate's distance from FP32 at its own batch size and XLA setting (``same``,
    one run), in units of the user's FP32 band: what precision alone changes."""
    band = _band(_tails(reference), fidelity.rel_floor)
    here, there = _tail(result, reference.span()), _tails(same)[0]
    if band is None or not (math.isfinite(here) and math.isfinite(there)):
        return None
    return abs(here - there) / band[1]


def _reached(
    samples: Sequence[int], losses: Sequence[float], target: float, width: float
) -> int | None:
    """The first sample count whose trailing window (``width`` samples) averages at or
    below ``target``; ``None`` if none does."""
    points = list(zip(samples, losses, strict=False))
    for end, _ in points:
        if end < width:
            continue
        window = [loss for s, loss in points if end - width < s <= end]
        if sum(window) / len(window) <= target + 1e-9 * abs(target) + 1e-12:
            return end
    return None


def time_to_quality(result: TrialResult, reference: Reference) -> dict[str, Any]:
    """How long the candidate takes to reach the final smoothed loss of the user's FP32
    training, against the FP32 training's own time (MLPerf's measure, on a trial's scale).

    Both curves are smoothed over a quarter of the budget; each side's time is the
    samples it needs over its samples/s (from the timed blocks).
    """
    band = _band(_tails(reference), 0.0)
    if band is None or result.fp32 is None or result.candidate is None:
        return {}
    target, end = band[0], reference.span()
    finite = [c for c in reference.curves if len(c) == len(reference.samples())]
    mean_curve = [sum(points) / len(points) for points in zip(*finite, strict=True)]
    fp32 = _reached(reference.samples(), mean_curve, target, end / 4)
    mine = _reached(result.curve.get("samples", []), result.curve["loss"], target, end / 4)
    out: dict[str, Any] = {"target_loss": target, "fp32_samples": fp32, "samples": mine}
    out["speedup"] = None
    if fp32 and mine:
        fp32_time = fp32 / result.fp32.samples_per_s
        out["speedup"] = fp32_time / (mine / result.candidate.samples_per_s)
    return out


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
        batch = result.curve.get("batch_size") or reference.batch_size
        if batch != reference.batch_size:
            return (
                "infeasible",
                f"learns worse per sample than your FP32 training: at batch {batch} "
                f"(yours {reference.batch_size}) the fidelity gap after "
                f"{reference.span()} samples is {gap:.2f} > tolerance {fidelity.tolerance:g}",
                gap,
            )
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
