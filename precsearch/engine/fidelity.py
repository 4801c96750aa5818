"""Judging a trial against FP32: does it train *worse* beyond the noise, and how long does
it take to reach FP32's quality.

Definitions (also in the README):
* **Figures**: the training loss smoothed over the last quarter of the budget (the mean
  of the points with ``0.75 * budget < samples <= budget``); with validation data, the
  validation loss and the first compiled metric after the budget's samples.
* **The noise**: ``n`` FP32 runs of the user's training from the same initial weights with
  data-order seeds 1..n (``budget.ref_seeds``, 12). A noise unit: a figure's sd over them.
* **The candidate's runs**: its timed run on data-order seed 0 (the seed of its FP32 twin)
  and ``m - 1`` untimed runs on seeds of its own (:func:`precsearch.engine.references.
  candidate_seeds`): no seed is shared with the noise runs, and no two policies share
  their own seeds, so that candidates of equal quality do not fail or pass together on
  one unlucky draw (FP32 itself, judged on seed 0 alone, read 1.13 on digits_cnn).
* **The test** (:mod:`precsearch.engine.quality_test`): per figure, one-sided, the
  difference of the means (the candidate's ``m`` runs minus the FP32 runs', in the worse
  direction) against the bar ``q * sd * sqrt(1/m + 1/n)`` (``sd`` FP32's), ``q`` the
  critical value of a studentized permutation test at ``alpha/k`` (``k`` figures judge;
  Bonferroni), at least a floor: for a loss, ``floor`` (2%) of how much FP32's figure fell
  over the budget; for a metric in [0, 1], ``metric_floor`` (half a point). FP32 judged as
  a candidate on held-out seeds is called worse at most ``alpha`` of the time, whatever
  the noise's distribution; ``m`` is the fewest runs (3-8) that catch a candidate 2 noise
  units worse on one figure 80% of the time at tolerance 1 (``references.candidate_runs``:
  with n = 12, 3 runs for k = 1, 4 for k = 2 or 3; 3 where no number reaches it;
  ``tests/test_fidelity.py``; ``benchmarks/results/intel_xeon_avx512_bf16/fidelity.md``).
* **Gap**: per figure, the difference over the bar (negative: better, never a failure);
  the largest over the figures that judge, feasible when ≤ ``tolerance`` (1: the test).
* **What cannot judge** (:func:`assess`): a figure FP32 does not move beyond the noise (an
  accuracy at chance), or a saturating training loss: left out, said; none: no study.
* **Time to quality**: the samples until the smoothed loss (trailing mean over a quarter
  of the budget) reaches the worst FP32 run's final one (MLPerf's quality target), over
  samples/s; a candidate trains on up to 1.5x the budget for it (:func:`time_to_quality`).
* **Feasible**: finite loss on every run, loss scale never below 1, at most
  ``max_skipped`` of the steps skipped for overflow, gap ≤ ``tolerance``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from precsearch.engine.quality_test import critical_value, t_critical_value
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
    out, start, total, bad = [], 0, 0.0, 0
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
    return [v for v in values if v is not None and math.isfinite(v)]  # JSON's null: None


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


def _bar(finals: list[float], m: int, critical: float, fig: dict[str, Any], signal: float,
         fidelity: Fidelity) -> float:  # fmt: skip
    """How far the mean of ``m`` candidate runs may be worse than the mean of the FP32
    runs ``finals`` on one figure ``fig``, at the statistic's critical value ``critical``
    (see the module doc)."""
    import numpy as np

    n = len(finals)
    sd = float(np.std(finals, ddof=1)) if n >= 2 else 0.0
    bound = critical * sd * math.sqrt(1 / m + 1 / n) if sd > 0 else 0.0
    floor = fidelity.metric_floor if fig["bounded"] else fidelity.floor * abs(signal)
    return max(bound, floor, 1e-12)


def assess(reference: Reference) -> dict[str, str]:
    """Which figures can judge a candidate at this budget: ``{figure: ""}`` for one that
    can, ``{figure: why not}`` for one that cannot (figures without data are absent).

    Not when FP32 does not move it from its value at initialisation in its better
    direction (a validation accuracy at 10 steps falls from 0.121 to 0.103 on
    MobileNetV3Small as the one class it predicts changes) beyond a one-sided 95% t-test
    and a floor (1% of the initial value; half a point for a metric); a training loss also
    not when it saturates (every run's smoothed loss below 1e-3 of its initial value).
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
    rest = f"raise --steps above {steps} for the rest to count"
    return f"{'; '.join(cannot)}: judged on {judged} only; {rest}"


def _candidate_values(result: TrialResult, end: int) -> dict[str, list[float]]:
    """Per figure, the candidate's value on each of its runs: seed 0 (timed) and its
    own seeds (``numerics["runs"]``; a run that went non-finite counts as ``inf``)."""
    runs = result.numerics.get("runs") or []
    out = {"loss": [_tail(result, end)], "val_loss": [result.val.get("loss")],
           "val_metric": [result.val.get("metric")]}  # fmt: skip
    for run in runs:
        bad = run.get("nonfinite_step") is not None
        for name in out:
            out[name].append(math.inf if bad else run.get(name))
    return {name: [v for v in values if v is not None] for name, values in out.items()}


def fidelity_gap(
    result: TrialResult, reference: Reference, fidelity: Fidelity
) -> tuple[float, dict[str, float]]:
    """The fidelity gap (the largest per-figure gap over the figures that can judge) and
    every figure's gap (see the module doc)."""
    judging = [name for name, why in assess(reference).items() if not why]
    candidate_figures = _candidate_values(result, reference.span())
    gaps: dict[str, float] = {}
    for name, fig in _figures(reference).items():
        finals, values = _finite(fig["finals"]), candidate_figures[name]
        if name not in judging or not values or not finals:
            continue
        if not all(math.isfinite(v) for v in values):
            gaps[name] = math.inf
            continue
        mean = sum(finals) / len(finals)
        signal = (fig["initial"] - mean) if fig["initial"] is not None else 0.0
        level, sign = fidelity.alpha / len(judging), fig["sign"]
        critical = critical_value([sign * v for v in finals], [sign * v for v in values], level)
        bar = _bar(finals, len(values), critical, fig, signal, fidelity)
        gaps[name] = sign * (sum(values) / len(values) - mean) / bar
    return (max(gaps.values()) if gaps else math.inf), gaps


def precision_gap(
    result: TrialResult, fp32_twin: Reference, reference: Reference, fidelity: Fidelity
) -> float | None:
    """The candidate's training loss against FP32's at its own batch size and XLA setting
    (``fp32_twin``: one run, seed 0, as the candidate's timed run), over the t-test's bar
    of one run against the user's FP32 runs (two single runs have no labelings to permute):
    what precision alone changes (positive: worse)."""
    finals = _finite(_tails(reference))
    here, there = _tail(result, reference.span()), _tails(fp32_twin)[0]
    if len(finals) < 2 or not (math.isfinite(here) and math.isfinite(there)):
        return None
    fig = _figures(reference)["loss"]
    signal = (fig["initial"] or 0.0) - sum(finals) / len(finals)
    critical = t_critical_value(len(finals), fidelity.alpha)  # one run against one: t's bar
    return (here - there) / _bar(finals, 1, critical, fig, signal, fidelity)


def quality_target(reference: Reference) -> float | None:
    """The worst FP32 run's final smoothed loss (``None`` when none ended finite)."""
    finals = _finite(_tails(reference))
    return max(finals) if finals else None


def judge_twin(fp32_twin: Reference, reference: Reference, fidelity: Fidelity) -> dict[str, Any]:
    """A candidate's FP32 twin (one run, seed 0) judged against the user's FP32 training
    like a candidate of one run: ``{status, reason, fidelity_gap}``."""
    curve = {"samples": fp32_twin.samples(), "loss": fp32_twin.curves[0]}
    val = {"loss": fp32_twin.val_loss[0], "metric": fp32_twin.val_metric[0]}
    twin = TrialResult(policy={}, curve=curve, val=val)
    status, reason, gap, _ = judge(twin, reference, fidelity)
    return {"status": status, "reason": reason, "fidelity_gap": gap if math.isfinite(gap) else None}


def time_to_quality(result: TrialResult, reference: Reference) -> dict[str, Any]:
    """FP32's time to the loss every FP32 run reached over the candidate's, with a 95%
    interval: the candidate's crossing taken as one more draw of FP32's crossings (a t
    prediction interval on their logs), widened by the speedup's own interval.

    Returns:
        ``{target_loss, fp32_samples, samples, speedup, speedup_low, speedup_high,
        outcome}``; ``outcome``: ``"reached"``, ``"not reached within 1.5x the budget"``
        or ``"not measured"`` (no timed blocks, or no finite FP32 runs)."""
    import numpy as np
    from scipy import stats

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
    fp32_samples = sorted(s for s in fp32 if s is not None and s > 0)
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
        out["speedup"] = speedup = fp32_time / (mine / result.candidate.samples_per_s)
        n, logs = len(fp32_samples), np.log(fp32_samples)
        spread = float(np.std(logs, ddof=1)) * math.sqrt(1 + 1 / n) if n >= 2 else math.inf
        half = float(stats.t.ppf(0.975, n - 1)) * spread if n >= 2 else math.inf
        ratios = result.block_ratios
        if ratios.get("low") and ratios.get("high"):  # the speed's own interval beside it
            half = math.hypot(half, math.log(ratios["high"] / ratios["low"]) / 2)
        out["speedup_low"] = speedup * math.exp(-half)
        out["speedup_high"] = speedup * math.exp(half)
    return out


def judge(
    result: TrialResult, reference: Reference, fidelity: Fidelity
) -> tuple[str, str, float, dict[str, float]]:
    """Status (``ok`` or ``infeasible``), reason, gap and per-figure gaps of a trial that
    ran to the end; "trains worse than FP32" only where the test says so."""
    numerics = result.numerics
    if numerics.get("nonfinite_step") is not None:
        return "infeasible", f"non-finite loss at step {numerics['nonfinite_step']}", math.inf, {}
    for run in [r for r in numerics.get("runs") or [] if r.get("nonfinite_step") is not None]:
        where = f"step {run['nonfinite_step']} of its run on data-order seed {run['seed']}"
        return "infeasible", f"non-finite loss at {where}", math.inf, {}
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
            f"trains worse than FP32{where}: {what} {gaps[worst]:.2f}x the test's bar "
            f"after {reference.span()} samples (one-sided, {fidelity.alpha:.0%} false "
            f"rejections; tolerance {fidelity.tolerance:g})",
            gap,
            gaps,
        )
    return "ok", "", gap, gaps


def better_note(gaps: dict[str, float]) -> str:
    """What a feasible candidate does better than FP32 beyond the noise, in words ("" if
    nothing): ``trains better than FP32: training loss 1.8x the test's bar better...``."""
    parts = [f"{_figure_words(name)} {-g:.1f}x the test's bar better than FP32's"
             for name, g in gaps.items() if g < -1]  # fmt: skip
    return "trains better than FP32: " + ", ".join(parts) if parts else ""
