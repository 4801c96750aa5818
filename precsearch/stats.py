"""Statistics of measured figures, shared by both sides of the process boundary.

A speed figure is always a *paired ratio*: in each round (or pair of timing blocks) two
configurations are measured side by side, and the round's ratio of their samples/s is
one observation. The estimate is the geometric mean of those ratios (the mean of their
logs: a ratio and its inverse weigh alike), and its uncertainty a Student-t confidence
interval of that mean (``scipy.stats.t``). Not the bootstrap: rounds come in as few as
three to eight, where a BCa interval covers far less than its level (at five rounds its
one-sided 97.5% bound missed 26 times in 400, not 10); the t interval holds its level
at any number of rounds for normal logs, and on the heavy-tailed rounds a shared CPU gives
(``tests/test_stats.py``). Nothing here imports TensorFlow or Optuna; numpy and scipy are
imported inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = [
    "CONFIDENCE",
    "HALF_WIDTH",
    "confidently_slower",
    "corrected_low",
    "half_width",
    "instance_spread",
    "instrument_percent",
    "log_figures",
    "figures_text",
    "log_ratios",
    "median",
    "pooled_bounds",
    "pooled_figures",
    "ratio_bounds",
    "ratio_figures",
]

CONFIDENCE = 0.95  # two-sided level of every interval shown
HALF_WIDTH = 0.03  # a ratio measured to within this (relative, at CONFIDENCE) is precise


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def log_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``log(a_i / b_i)`` per round: the paired observations of ``a``'s speed over ``b``'s."""
    if len(a) != len(b):
        raise ValueError(f"paired figures need equal lengths, got {len(a)} and {len(b)}")
    return [math.log(x / y) for x, y in zip(a, b, strict=True)]


def ratio_bounds(logs: Sequence[float], alpha: float) -> tuple[float, float]:
    """``(low, high)``: one-sided bounds, each at level ``1 - alpha``, of the geometric
    mean ratio whose per-round logs are ``logs`` (together a two-sided interval at
    ``1 - 2 * alpha``).

    Student-t on the mean of the logs, ``n - 1`` degrees of freedom: on simulated sets of
    five log-normal rounds (sd 8%) the one-sided 97.5% bound misses 2.5% of the time
    (497 of 20000), and within its level at three to eight rounds with one block in ten
    stalled (``tests/test_stats.py``). With one
    round there is no interval (infinitely wide); rounds that all agree give the
    estimate's own bounds.
    """
    import numpy as np
    from scipy import stats

    values = np.asarray(logs, dtype=float)
    if values.size < 2:
        return (0.0, math.inf)
    mean, sd = float(values.mean()), float(values.std(ddof=1))
    if sd <= 1e-12 * max(1.0, abs(mean)):
        return (math.exp(mean), math.exp(mean))
    reach = float(stats.t.ppf(1 - alpha, values.size - 1)) * sd / math.sqrt(values.size)
    return math.exp(mean - reach), math.exp(mean + reach)


def confidently_slower(
    logs: Sequence[float], look: int, alpha: float = 0.025, bar: float = 1.0
) -> bool:
    """Whether paired log ratios (candidate over FP32) put the candidate's speedup below
    ``bar`` (1: FP32's speed) beyond doubt: the check a trial makes after each block pair
    to stop early.

    A one-sided Student-t upper bound of the mean log below ``log(bar)``. The check is repeated
    (``look`` 1, 2, ... as pairs come in), so look ``k`` spends ``alpha / (k (k + 1))``:
    over any number of looks at most ``alpha`` of equal-speed candidates stop. Not the
    bootstrap: with three to eight pairs its interval covers far less than its level
    (three pairs all on one side of the true mean happen one time in four).
    """
    import numpy as np
    from scipy import stats

    values = np.asarray(logs, dtype=float)
    if values.size < 2 or look < 1:
        return False
    mean, sd = float(values.mean()), float(values.std(ddof=1))
    level = 1 - alpha / (look * (look + 1))
    upper = mean + float(stats.t.ppf(level, values.size - 1)) * sd / math.sqrt(values.size)
    return upper < math.log(bar)


def log_figures(logs: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The figures of a ratio from its per-round logs: the geometric-mean ``estimate``
    with its t interval ``low``-``high`` at ``confidence``, the ``median``,
    ``min`` and ``max`` of the per-round ratios, and the number of ``rounds``."""
    ratios = [math.exp(v) for v in logs]
    low, high = ratio_bounds(logs, (1 - confidence) / 2)
    return {
        "estimate": math.exp(sum(logs) / len(logs)),
        "low": low,
        "high": high,
        "confidence": confidence,
        "median": median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "rounds": len(ratios),
    }


def ratio_figures(
    a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE
) -> dict[str, Any]:
    """``a`` over ``b``, round by round (:func:`log_figures` of :func:`log_ratios`)."""
    return log_figures(log_ratios(a, b), confidence)


def instance_spread(groups: Sequence[Sequence[Sequence[float]]]) -> tuple[float, int]:
    """``(variance, df)``: how far independently built instances of one configuration
    read apart for good (the variance of an instance's fixed offset in log speed), and
    its degrees of freedom.

    Each group is one configuration's instances (two or more), each a list of per-round
    rates from the same rounds. Per group, the variance of the instances' mean logs less
    what the rounds' own noise puts in it (the instance-by-round residual variance over
    the rounds); pooled over the groups by their degrees of freedom, never below 0.
    """
    import numpy as np

    total, df = 0.0, 0
    for group in groups:
        logs = np.log(np.asarray(group, dtype=float)).T  # rounds x instances
        rounds, count = logs.shape
        if count < 2 or rounds < 2:
            continue
        means = logs.mean(axis=0)
        residual = logs - means - logs.mean(axis=1, keepdims=True) + logs.mean()
        within = float((residual**2).sum()) / ((rounds - 1) * (count - 1))
        total += (count - 1) * (float(means.var(ddof=1)) - within / rounds)
        df += count - 1
    return (max(0.0, total / df) if df else 0.0), df


def pooled_bounds(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    alpha: float,
    spread: tuple[float, int] = (0.0, 0),
) -> tuple[float, float]:
    """:func:`ratio_bounds` of ``a`` over ``b`` where each is one or more instances of a
    configuration (per-round rates, the same rounds): per round, the mean log of ``a``'s
    instances less ``b``'s.

    The rounds' spread alone would leave out each instance's fixed offset, which more
    rounds do not average away: its variance (``spread``, :func:`instance_spread`) enters
    as ``variance * (1/n_a + 1/n_b)``, with Welch-Satterthwaite degrees of freedom.
    """
    import numpy as np
    from scipy import stats

    logs = np.log(np.asarray(a, dtype=float)).mean(axis=0)
    logs -= np.log(np.asarray(b, dtype=float)).mean(axis=0)
    variance, df = spread
    if logs.size < 2:
        return (0.0, math.inf)
    if not (df and variance > 0):
        return ratio_bounds(list(logs), alpha)
    mean = float(logs.mean())
    rounds_part = float(logs.var(ddof=1)) / logs.size
    instance_part = variance * (1 / len(a) + 1 / len(b))
    total = rounds_part + instance_part
    dof = total**2 / (instance_part**2 / df + rounds_part**2 / (logs.size - 1))
    reach = float(stats.t.ppf(1 - alpha, dof)) * math.sqrt(total)
    return math.exp(mean - reach), math.exp(mean + reach)


def pooled_figures(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    spread: tuple[float, int] = (0.0, 0),
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """:func:`log_figures` of ``a``'s instances over ``b``'s, per round, with the interval
    of :func:`pooled_bounds`."""
    import numpy as np

    logs = np.log(np.asarray(a, dtype=float)).mean(axis=0)
    logs -= np.log(np.asarray(b, dtype=float)).mean(axis=0)
    figures = log_figures([float(v) for v in logs], confidence)
    figures["low"], figures["high"] = pooled_bounds(a, b, (1 - confidence) / 2, spread)
    return figures


def corrected_low(figures: dict[str, Any], alpha: float) -> float:
    """The lower bound of a ratio's figures (:func:`log_figures`, a t interval) moved to
    one-sided level ``1 - alpha``: its standard error read back from its ``low``,
    ``estimate``, ``rounds`` and ``confidence``. Figures without those keep their ``low``."""
    from scipy import stats

    low, estimate, rounds = figures.get("low"), figures.get("estimate"), figures.get("rounds")
    if not (low and estimate and rounds and rounds >= 2 and low > 0):
        return low or 0.0
    level = 1 - (1 - figures.get("confidence", CONFIDENCE)) / 2
    error = math.log(estimate / low) / float(stats.t.ppf(level, rounds - 1))
    return math.exp(math.log(estimate) - float(stats.t.ppf(1 - alpha, rounds - 1)) * error)


def half_width(figures: dict[str, Any]) -> float:
    """Half the interval of a ratio's figures, relative to its estimate."""
    return (figures["high"] - figures["low"]) / 2 / figures["estimate"]


def figures_text(figures: dict[str, Any] | None) -> str:
    """A ratio as ``1.62x (1.55-1.70)``: the estimate and its confidence interval (``-``
    for none). Figures from before intervals were kept show their median and range."""
    if not figures:
        return "-"
    if "estimate" in figures:
        return f"{figures['estimate']:.2f}x ({figures['low']:.2f}-{figures['high']:.2f})"
    return f"{figures['median']:.2f}x ({figures['min']:.2f}-{figures['max']:.2f})"


def instrument_percent(null: dict[str, Any]) -> float:
    """The A/A figures as one error in percent: the farthest its 95% interval reaches
    from 1, either way."""
    return max(abs(null["low"] - 1), abs(null["high"] - 1)) * 100
