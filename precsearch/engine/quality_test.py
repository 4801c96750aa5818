"""The quality test on one figure: a candidate's runs against FP32's, a studentized
permutation test (``scipy.stats.permutation_test``'s, faster), and the rates it states.

* **The statistic**: the difference of the means in the worse direction over its
  standard error from FP32's runs alone, ``T = d / (sd * sqrt(1/m + 1/n))`` (``m``
  candidate runs, ``n`` FP32 runs): the t statistic.
* **Its null distribution**: ``T`` over the ways of labelling ``m`` of the ``n + m`` runs
  as the candidate's: all of them, up to ``DRAWN_LABELINGS``, else the observed one and
  ``DRAWN_LABELINGS`` drawn with a fixed seed. A candidate that trains like FP32 has runs
  exchangeable with FP32's (other data-order seeds from the same weights), and then the
  test calls it worse at most its level of the time *whatever the noise's distribution*
  (exactly with every labeling; to within the resolution of the drawn ones, 1e-4). The
  t-test it replaces assumed normal noise; the real figures are skewed, and on them it
  called FP32 worse more often than it said
  (``benchmarks/results/intel_xeon_avx512_bf16/fidelity.md``).
* **The critical value** ``q``: ``T`` above it rejects (``p <= level``: the ``r``-th
  largest ``T`` of the other labelings, ``r`` the labelings times the level; ties with it
  do not reject). The bar a candidate's difference is measured in is
  ``q * sd * sqrt(1/m + 1/n)``; ``q`` depends on the candidate's runs too (a candidate far
  worse widens its own permutation distribution), so a gap well beyond 1 orders
  candidates rather than measuring them. Where the labelings are too few to reach the
  level (``1 / level`` or more are needed: one run against 12 FP32 runs has 13), ``q`` is
  the t quantile, which assumes normal noise.
* **The stated rates** (:func:`stated_rates`): the false-rejection rate, at most the
  labelings' share the test rejects for any noise at tolerance 1 or more; the power, for
  a candidate ``POWER_SHIFT`` noise units worse, simulated on normal noise
  (``POWER_DRAWS`` draws, fixed seed); for the t quantile, both from the t and noncentral
  t distributions (normal noise), as is the false-rejection rate at a tolerance below 1.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DRAWN_LABELINGS",
    "POWER_DRAWS",
    "POWER_SHIFT",
    "critical_value",
    "labelings",
    "stated_rates",
    "t_critical_value",
]

DRAWN_LABELINGS = 9999  # drawn where there are more labelings (the test's resolution 1e-4)
POWER_DRAWS = 2000  # normal-noise draws that simulate the stated power (+-0.9 points at 80%)
POWER_SHIFT = 2.0  # the power is stated for a candidate this many noise units worse
_CHUNK_VALUES = 5 * 10**5  # statistics computed at once: memory (a trial's peak), not the result
_SEED = 33  # the drawn labelings' and the power's draws: the same verdict every time
_TIES = 1e-9  # relative: a labeling whose T ties the observed one's is as large, not rounding


def labelings(n: int, m: int) -> int:
    """How many labelings the test compares: every way of choosing the candidate's ``m``
    of ``n + m`` runs, or ``DRAWN_LABELINGS`` and the observed one where there are more."""
    return min(math.comb(n + m, m), DRAWN_LABELINGS + 1)


def _rejections(n: int, m: int, level: float) -> int:
    """How many labelings a test at ``level`` may reject: 0 where it cannot reach it."""
    return math.floor(labelings(n, m) * level + 1e-9)


@functools.lru_cache(maxsize=16)
def _labeling_matrix(n: int, m: int) -> np.ndarray:
    """The labelings as a matrix (labelings x (m + n), 1 where a run is labelled the
    candidate's): row 0 the observed one (the candidate's runs first); all of them, or
    ``DRAWN_LABELINGS`` drawn with a fixed seed besides it."""
    import numpy as np

    if math.comb(n + m, m) <= DRAWN_LABELINGS:
        chosen = np.array(list(itertools.combinations(range(n + m), m)))
    else:
        order = np.random.default_rng(_SEED).random((DRAWN_LABELINGS, n + m)).argsort(axis=1)
        chosen = np.vstack([np.arange(m)[None], order[:, :m]])
    matrix = np.zeros((len(chosen), n + m))
    np.put_along_axis(matrix, chosen, 1.0, axis=1)
    return matrix


def _critical_and_observed(
    fp32: np.ndarray, candidate: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``fp32`` (draws x n) and ``candidate`` (draws x m), larger is worse:
    the critical value ``q`` at ``level`` and the observed statistic ``T``.

    ``scipy.stats.permutation_test`` gives the same p-values (``tests/test_quality_test.py``)
    but enumerates the labelings in Python, 23 ms a figure; the judge and the stated power
    need thousands, so the labelings are one cached matrix and every ``T`` two products."""
    import numpy as np

    (draws, n), m = fp32.shape, candidate.shape[1]
    labels = _labeling_matrix(n, m)
    r = _rejections(n, m, level)  # p <= level: r - 1 other labelings' T as large at most
    critical, observed = np.empty(draws), np.empty(draws)
    chunk = max(1, _CHUNK_VALUES // len(labels))
    for start in range(0, draws, chunk):
        rows = slice(start, start + chunk)
        runs = np.hstack([candidate[rows], fp32[rows]])
        runs = runs - runs.mean(axis=1, keepdims=True)  # sums of squares without cancellation
        sums, squares = runs @ labels.T, (runs**2) @ labels.T
        fp32_sums = runs.sum(axis=1, keepdims=True) - sums
        fp32_squares = (runs**2).sum(axis=1, keepdims=True) - squares
        variance = np.maximum((fp32_squares - fp32_sums**2 / n) / (n - 1), 0.0)
        diff = sums / m - fp32_sums / n
        scale = np.sqrt(variance) * math.sqrt(1 / m + 1 / n)
        with np.errstate(divide="ignore", invalid="ignore"):
            stat = np.where(scale > 0, diff / scale, np.where(diff == 0, 0.0, diff * np.inf))
        # Against the other labelings alone, raised past rounding: a tie does not reject.
        kth = -np.partition(-stat[:, 1:], r - 1, axis=1)[:, r - 1]
        critical[rows] = kth + _TIES * np.abs(kth)
        observed[rows] = stat[:, 0]
    return critical, observed


def t_critical_value(n: int, level: float) -> float:
    """The t quantile for ``n`` FP32 runs at ``level``: the critical value of the statistic
    where runs differ by normal noise (``inf`` with fewer than 2 runs)."""
    from scipy import stats

    return float(stats.t.ppf(1 - level, n - 1)) if n >= 2 else math.inf


def critical_value(fp32: Sequence[float], candidate: Sequence[float], level: float) -> float:
    """The critical value of the statistic (larger values are worse): the candidate's
    runs are called worse at ``level`` when ``T`` is above it; the t quantile where the
    labelings are too few (see the module doc); ``inf`` with fewer than 2 FP32 runs."""
    import numpy as np

    n, m = len(fp32), len(candidate)
    if n < 2 or _rejections(n, m, level) < 1:
        return t_critical_value(n, level)
    critical, _ = _critical_and_observed(np.array([fp32], float), np.array([candidate], float),
                                         level)  # fmt: skip
    return float(critical[0])


def stated_rates(n: int, m: int, k: int, alpha: float, tolerance: float = 1.0) -> dict[str, Any]:
    """The test's rates for ``n`` FP32 runs, ``m`` candidate runs, ``k`` judging figures
    (Bonferroni: each at ``alpha / k``) and a gap ``tolerance``: ``false_rejection`` (FP32
    as a candidate called worse) and ``power`` (``POWER_SHIFT`` noise units worse on one
    figure, caught), both lower where a floor sets the bar; ``test``: ``"permutation"``,
    or ``"t"`` where the labelings are too few (see the module doc). A fresh dict."""
    return dict(_stated_rates(n, m, max(k, 1), alpha, tolerance))


@functools.lru_cache(maxsize=64)
def _stated_rates(n: int, m: int, k: int, alpha: float, tolerance: float) -> dict[str, Any]:
    import numpy as np
    from scipy import stats

    level = alpha / k
    rates = {"fp32_runs": n, "candidate_runs": m, "figures": k, "tolerance": tolerance,
             "shift_noise_units": POWER_SHIFT, "labelings": labelings(n, m)}  # fmt: skip
    if _rejections(n, m, level) < 1:
        bar, df = tolerance * t_critical_value(n, level), n - 1
        power = float(stats.nct.sf(bar, df, POWER_SHIFT / math.sqrt(1 / m + 1 / n)))
        false_rejection = round(min(1.0, k * float(stats.t.sf(bar, df))), 9)
        return {**rates, "test": "t", "power": power, "false_rejection": false_rejection,
                "power_draws": None}  # fmt: skip
    rng = np.random.default_rng(_SEED)
    fp32 = rng.normal(size=(POWER_DRAWS, n))
    like_fp32 = rng.normal(size=(POWER_DRAWS, m))
    critical, observed = _critical_and_observed(fp32, like_fp32 + POWER_SHIFT, level)
    power = float(np.mean(observed > tolerance * critical))
    if tolerance >= 1:
        false_rejection = k * _rejections(n, m, level) / labelings(n, m)
    else:  # a bar below the test's: simulated on normal noise
        critical, observed = _critical_and_observed(fp32, like_fp32, level)
        false_rejection = min(1.0, k * float(np.mean(observed > tolerance * critical)))
    return {**rates, "test": "permutation", "power": power, "false_rejection": false_rejection,
            "power_draws": POWER_DRAWS}  # fmt: skip
