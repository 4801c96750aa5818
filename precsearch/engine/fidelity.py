"""Judging a trial against FP32: does it train *worse* beyond the noise, and how long does
it take to reach FP32's quality.

Definitions (also in the README):

* **Figures**: the training loss smoothed over the last quarter of the budget (the mean
  of the points with ``0.75 * budget < samples <= budget``); with validation data, the
  validation loss and the first compiled metric after the budget's samples.
* **The noise**: FP32 runs of the user's training from the same initial weights with
  data-order seeds 1..n; the candidate trains with seed 0, which is none of them, so it
  is judged as one more draw held out from the runs that measure the noise. For each
  figure the unit is the one-sided prediction bound of one more FP32 run above the
  runs' mean, ``t(1 - alpha/k, n - 1) * sd * sqrt(1 + 1/n)`` (``k`` figures judge;
  Bonferroni), at least a floor: for a loss, ``floor`` (2%) of how much FP32's figure
  fell over the budget (the learning signal, not the loss's level); for a metric in
  [0, 1], ``metric_floor`` (half a point).
* **Gap**: per figure, how far the candidate is from the runs' mean *in the worse
  direction*, in units; negative when it trains better. The fidelity gap is the largest
  over the figures that can judge, feasible when ≤ ``tolerance`` (1: FP32 itself, as a
  candidate, is called infeasible about ``alpha`` of the time when its figures vary
  normally; the FP32 baseline trial is exactly that test).
* **What cannot judge** (:func:`assess`): a figure that FP32 does not move from its value
  at initialisation beyond the noise in its better direction (a validation accuracy at
  chance, or one that drifts between chance values as the predicted class changes), a
  training loss that barely falls, or one that saturates (every FP32 run near 0 over the
  last quarter). It is left out and said; when none can judge, the study refuses to start.
* **Time to quality**: the samples a run needs until its smoothed loss (trailing mean
  over a quarter of the budget) first reaches the loss every FP32 run reached (the
  worst run's final smoothed loss: MLPerf's quality target), interpolated; over its
  samples/s. A candidate trains on up to 1.5x the budget for it.
* **Feasible**: finite loss throughout, loss scale never below 1, at most
  ``max_skipped`` of the steps skipped for overflow, gap ≤ ``tolerance``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from precsearch.records import Fidelity, Reference, TrialResult

__all__ = [
    "TTQ_REACH",
    "assess",
    "better_note",
    "crossing",
    "fidelity_gap",
    "higher_is_better",
    "judge",
    "judge_twin",
    "judging_note",
    "precision_gap",
    "quality_target",
    "smoothed",
    "time_to_quality",
    "window_mean",
]

TTQ_REACH = 1.5  # a candidate trains on up to this many budgets to reach FP32's quality
_SATURATED = 1e-3  # a loss below this share of its initial value has nothing left to show
_LOWER_BETTER = ("loss", "error", "mae", "mse", "crossentropy", "hinge", "divergence",
                 "poisson", "logcosh")  # fmt: skip


def _figure_words(name: str, metric_name: str | None = None) -> str:
    """A figure's name for people: ``training loss``, ``validation accuracy``..."""
    if name == "loss":
        return "training loss"
    return "validation loss" if name == "val_loss" else f"validation {metric_name or 'metric'}"


def higher_is_better(metric_name: str | None) -> bool:
    """Whether a Keras metric improves upwards (accuracy, AUC) rather than down (MAE)."""
    name = (metric_name or "").lower()
    return not any(word in name for word in _LOWER_BETTER)


def window_mean(samples: Sequence[int], losses: Sequence[float], end: int) -> float:
    """The smoothed loss at ``end`` samples: the mean of the points in the last quarter
    of the budget (``0.75 * end < samples <= end``), or the last point at or before
    ``end`` where a curve is too coarse to have one there."""
    points = [(s, loss) for s, loss in zip(samples, losses, strict=False) if s <= end]
    if not points:
        return math.nan
    tail = [loss for s, loss in points if s > 0.75 * end]
    values = tail or [points[-1][1]]
    if any(v is None or not math.isfinite(v) for v in values):
        return math.inf
    return sum(values) / len(values)


def smoothed(samples: Sequence[int], losses: Sequence[float], width: float) -> list[float]:
    """The trailing mean of the loss over ``width`` samples at each point (``nan``
    before a full window; ``inf`` where the window holds a non-finite loss)."""
    out = []
    start = 0
    total, bad = 0.0, 0
    for i, (s, loss) in enumerate(zip(samples, losses, strict=False)):
        if loss is None or not math.isfinite(loss):
            bad += 1
        else:
            total += loss
        while samples[start] <= s - width:
            old = losses[start]
            if old is None or not math.isfinite(old):
                bad -= 1
            else:
                total -= old
            start += 1
        if s < width:
            out.append(math.nan)
        else:
            out.append(math.inf if bad else total / (i - start + 1))
    return out


def crossing(samples: Sequence[int], curve: Sequence[float], target: float) -> float | None:
    """The samples at which ``curve`` first comes down to ``target``, interpolated
    linearly between the two points around it; ``None`` if it never does."""
    previous = None
    for s, value in zip(samples, curve, strict=False):
        if math.isnan(value):
            continue
        if value <= target:
            if previous is None or not math.isfinite(previous[1]):
                return float(s)
            s0, v0 = previous
            return s0 + (s - s0) * (v0 - target) / (v0 - value)
        previous = (s, value)
    return None


def _tails(reference: Reference) -> list[float]:
    samples, end = reference.samples(), reference.span()
    return [window_mean(samples, curve, end) for curve in reference.curves]


def _tail(result: TrialResult, end: int) -> float:
    return window_mean(result.curve.get("samples", []), result.curve["loss"], end)


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _figures(reference: Reference) -> dict[str, dict[str, Any]]:
    """Per figure: the FP32 runs' finals, the value at initialisation, the direction
    (+1: lower is better) and the floor's kind."""
    firsts = _finite([curve[0] if curve else None for curve in reference.curves])
    initial = reference.initial or {}
    metric_up = higher_is_better(reference.metric_name)
    return {
        "loss": {"finals": _tails(reference), "initial": sum(firsts) / len(firsts)
                 if firsts else None, "sign": 1.0, "bounded": False},
        "val_loss": {"finals": list(reference.val_loss), "initial": initial.get("loss"),
                     "sign": 1.0, "bounded": False},
        "val_metric": {"finals": list(reference.val_metric), "initial": initial.get("metric"),
                       "sign": -1.0 if metric_up else 1.0, "bounded": True},
    }  # fmt: skip


def _unit(finals: list[float], signal: float, bounded: bool, k: int, fidelity: Fidelity) -> float:
    """The noise unit of one figure (see the module doc)."""
    import numpy as np
    from scipy import stats

    n = len(finals)
    sd = float(np.std(finals, ddof=1)) if n >= 2 else 0.0
    t = float(stats.t.ppf(1 - fidelity.alpha / k, n - 1)) if n >= 2 else math.inf
    bound = t * sd * math.sqrt(1 + 1 / n) if sd > 0 else 0.0
    floor = fidelity.metric_floor if bounded else fidelity.floor * abs(signal)
    return max(bound, floor, 1e-12)


def assess(reference: Reference) -> dict[str, str]:
    """Which figures can judge a candidate at this budget: ``{figure: ""}`` for one that
    can, ``{figure: why not}`` for one that cannot (figures without data are absent).

    A figure cannot judge when FP32 does not move it from its value at initialisation in
    its better direction (a figure that gets worse as FP32 trains is no learning signal: a
    validation accuracy at 10 steps falls from 0.121 to 0.103 on MobileNetV3Small as the
    one class it predicts changes): the runs' mean is not beyond it by a one-sided 95%
    t-test (``t(0.95, n - 1) * sd / sqrt(n)``) and by a floor (1% of the initial value;
    half a point for a metric); a training loss also not when it saturates (every run's
    smoothed loss below 1e-3 of its initial value).
    """
    import numpy as np
    from scipy import stats

    out: dict[str, str] = {}
    steps = reference.steps
    for name, fig in _figures(reference).items():
        finals = _finite(fig["finals"])
        if not finals or fig["initial"] is None:
            continue
        mean, initial = float(np.mean(finals)), float(fig["initial"])
        sd = float(np.std(finals, ddof=1)) if len(finals) >= 2 else 0.0
        label = _figure_words(name, reference.metric_name)
        moved = fig["sign"] * (initial - mean)
        floor = 0.005 if fig["bounded"] else 0.01 * abs(initial)
        n = len(finals)
        noise = float(stats.t.ppf(0.95, n - 1)) * sd / math.sqrt(n) if n >= 2 else 0.0
        if name == "loss" and max(finals) <= _SATURATED * abs(initial):
            out[name] = (
                f"FP32's {label} saturates ({max(finals):.4f} on every seed by the last "
                f"quarter of {steps} steps, from {initial:.4f})"
            )
        elif moved <= max(noise, floor):
            how = "gets worse" if moved < -max(noise, floor) else "does not move"
            out[name] = (
                f"FP32's {label} {how} over {steps} steps ({initial:.4g} at "
                f"initialisation, {mean:.4g} after)"
            )
        else:
            out[name] = ""
    return out


def judging_note(assessment: dict[str, str], steps: int) -> str:
    """One line for people on what cannot judge, and what judges instead ("" when all can)."""
    cannot = [why for why in assessment.values() if why]
    if not cannot:
        return ""
    can = [_figure_words(name) for name, why in assessment.items() if not why]
    judged = ", ".join(can) if can else "nothing"
    return (
        f"{'; '.join(cannot)}: judged on {judged} only; raise --steps above {steps} for the "
        "rest to count"
    )


def fidelity_gap(
    result: TrialResult, reference: Reference, fidelity: Fidelity
) -> tuple[float, dict[str, float]]:
    """The fidelity gap (the largest per-figure gap over the figures that can judge) and
    every figure's gap (see the module doc)."""
    judging = [name for name, why in assess(reference).items() if not why]
    candidate_figures = {
        "loss": _tail(result, reference.span()),
        "val_loss": result.val.get("loss"),
        "val_metric": result.val.get("metric"),
    }
    gaps: dict[str, float] = {}
    for name, fig in _figures(reference).items():
        finals, value = _finite(fig["finals"]), candidate_figures[name]
        if name not in judging or value is None or not finals:
            continue
        if not math.isfinite(value):
            gaps[name] = math.inf
            continue
        mean = sum(finals) / len(finals)
        signal = (fig["initial"] - mean) if fig["initial"] is not None else 0.0
        unit = _unit(finals, signal, fig["bounded"], len(judging), fidelity)
        gaps[name] = fig["sign"] * (value - mean) / unit
    return (max(gaps.values()) if gaps else math.inf), gaps


def precision_gap(
    result: TrialResult, fp32_twin: Reference, reference: Reference, fidelity: Fidelity
) -> float | None:
    """The candidate's training loss against FP32's at its own batch size and XLA setting
    (``fp32_twin``: one run, seed 0, as the candidate), in the user's noise units: what
    precision alone changes (positive: worse)."""
    finals = _finite(_tails(reference))
    here, there = _tail(result, reference.span()), _tails(fp32_twin)[0]
    if len(finals) < 2 or not (math.isfinite(here) and math.isfinite(there)):
        return None
    fig = _figures(reference)["loss"]
    signal = (fig["initial"] or 0.0) - sum(finals) / len(finals)
    return (here - there) / _unit(finals, signal, False, 1, fidelity)


def quality_target(reference: Reference) -> float | None:
    """The loss every FP32 run reached: the worst run's final smoothed loss (``None``
    when no run ended finite)."""
    finals = _finite(_tails(reference))
    return max(finals) if finals else None


def judge_twin(fp32_twin: Reference, reference: Reference, fidelity: Fidelity) -> dict[str, Any]:
    """A candidate's FP32 twin (one run with the candidate's data order) judged
    against the user's FP32 training like a candidate: ``{status, reason,
    fidelity_gap}``."""
    twin = TrialResult(
        policy={},
        curve={"samples": fp32_twin.samples(), "loss": fp32_twin.curves[0]},
        val={"loss": fp32_twin.val_loss[0], "metric": fp32_twin.val_metric[0]},
    )
    status, reason, gap, _ = judge(twin, reference, fidelity)
    return {"status": status, "reason": reason, "fidelity_gap": gap if math.isfinite(gap) else None}


def time_to_quality(result: TrialResult, reference: Reference) -> dict[str, Any]:
    """How long the candidate takes to reach the loss every FP32 run reached, against
    FP32's own time (see the module doc).

    Returns:
        ``{target_loss, fp32_samples, samples, speedup, outcome}``; ``outcome`` is
        ``"reached"``, ``"not reached within 1.5x the budget"`` or ``"not measured"``
        (no timed blocks, or no finite FP32 runs).
    """
    target = quality_target(reference)
    if target is None or result.fp32 is None or result.candidate is None:
        return {"outcome": "not measured"}
    width = reference.span() / 4
    ref_samples = reference.samples()
    fp32 = [
        crossing(ref_samples, smoothed(ref_samples, curve, width), target)
        for curve in reference.curves
        if len(curve) == len(ref_samples)
    ]
    fp32_samples = sorted(s for s in fp32 if s is not None)
    reach = TTQ_REACH * reference.span()
    samples = [s for s in result.curve.get("samples", []) if s <= reach]
    losses = result.curve["loss"][: len(samples)]
    mine = crossing(samples, smoothed(samples, losses, width), target)
    out: dict[str, Any] = {"target_loss": target, "samples": mine, "speedup": None}
    out["fp32_samples"] = fp32_samples[len(fp32_samples) // 2] if fp32_samples else None
    if mine is None:
        out["outcome"] = f"not reached within {TTQ_REACH:g}x the budget"
        return out
    out["outcome"] = "reached"
    if out["fp32_samples"]:
        fp32_time = out["fp32_samples"] / result.fp32.samples_per_s
        out["speedup"] = fp32_time / (mine / result.candidate.samples_per_s)
    return out


def judge(
    result: TrialResult, reference: Reference, fidelity: Fidelity
) -> tuple[str, str, float, dict[str, float]]:
    """Status (``ok`` or ``infeasible``), reason, gap and per-figure gaps of a trial that
    ran to the end."""
    numerics = result.numerics
    if numerics.get("nonfinite_step") is not None:
        return "infeasible", f"non-finite loss at step {numerics['nonfinite_step']}", math.inf, {}
    min_scale = numerics.get("min_loss_scale")
    if min_scale is not None and min_scale < 1:
        return "infeasible", f"loss scale collapsed to {min_scale:g}", math.inf, {}
    share = numerics.get("skipped_share") or 0.0
    gap, gaps = fidelity_gap(result, reference, fidelity)
    if share > fidelity.max_skipped:
        return "infeasible", f"{share:.0%} of steps skipped for overflow", gap, gaps
    if gap > fidelity.tolerance:
        worst = max(gaps, key=lambda name: gaps[name])
        what = _figure_words(worst, reference.metric_name)
        batch = result.curve.get("batch_size") or reference.batch_size
        where = f" at batch {batch} (yours {reference.batch_size})" if (
            batch != reference.batch_size) else ""  # fmt: skip
        return (
            "infeasible",
            f"trains worse than FP32{where}: {what} {gaps[worst]:.2f} noise units worse "
            f"after {reference.span()} samples (tolerance {fidelity.tolerance:g})",
            gap,
            gaps,
        )
    return "ok", "", gap, gaps


def better_note(gaps: dict[str, float]) -> str:
    """What a feasible candidate does better than FP32 beyond the noise, in words ("" if
    nothing): ``trains better than FP32: training loss 1.8 noise units below FP32's``."""
    parts = [f"{_figure_words(name)} {-g:.1f} noise units better than FP32's"
             for name, g in gaps.items() if g < -1]  # fmt: skip
    return "trains better than FP32: " + ", ".join(parts) if parts else ""
