"""The quality test's statistic (engine/quality_test.py): scipy's permutation test, its
level on skewed noise where the t-test's fails, and the rates it states (no TensorFlow)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from precsearch.engine.quality_test import critical_value, labelings, stated_rates


def t_statistic(fp32, candidate, axis=-1):
    """The difference of the means over its standard error from FP32's runs alone."""
    diff = np.mean(candidate, axis=axis) - np.mean(fp32, axis=axis)
    n, m = np.shape(fp32)[axis], np.shape(candidate)[axis]
    return diff / (np.std(fp32, axis=axis, ddof=1) * math.sqrt(1 / m + 1 / n))


@pytest.mark.parametrize(
    ("n", "m", "level", "quantum"),
    [(12, 3, 0.05, None), (12, 4, 0.05 / 3, None), (6, 3, 0.05 / 3, None), (12, 4, 0.05, 0.25)],
)
def test_it_rejects_where_scipys_permutation_test_does(n, m, level, quantum):
    # quantum: values on a grid, as an accuracy over a few hundred examples is; runs tie,
    # and a labeling that ties the observed one counts as large as it.
    rng, rejected, draws = np.random.default_rng(5), 0, 60
    for _ in range(draws):
        fp32, candidate = rng.normal(size=n), rng.normal(1.5, size=m)
        if quantum:
            fp32, candidate = (
                np.round(fp32 / quantum) * quantum,
                np.round(candidate / quantum) * quantum,
            )
        p = scipy_stats.permutation_test(
            (fp32, candidate), t_statistic, permutation_type="independent", alternative="greater",
        ).pvalue  # fmt: skip
        ours = t_statistic(fp32, candidate) > critical_value(fp32, candidate, level)
        assert ours == (p <= level)
        rejected += ours
    assert 0 < rejected < draws  # both verdicts compared


@pytest.mark.parametrize("m", [3, 4, 8])
def test_on_skewed_noise_it_holds_its_level_where_the_t_test_does_not(m):
    # Lognormal runs (skewness 6; the real validation losses are skewed the same way,
    # less): a candidate's few runs catch the long tail more often than the t-test allows.
    # 8 runs against 12 have 125970 labelings: 9999 drawn.
    rng, draws, n, level = np.random.default_rng(6), 4000, 12, 0.05 / 3
    runs = rng.lognormal(0.0, 1.0, size=(draws, n + m))
    fp32, candidate = runs[:, :n], runs[:, n:]
    observed = t_statistic(fp32, candidate)
    ours = sum(
        t > critical_value(f, c, level) for t, f, c in zip(observed, fp32, candidate, strict=True)
    )
    t_test = int((observed > scipy_stats.t.ppf(1 - level, n - 1)).sum())
    assert scipy_stats.binomtest(int(ours), draws, level, alternative="greater").pvalue > 0.01
    assert scipy_stats.binomtest(t_test, draws, level, alternative="greater").pvalue < 1e-3


def test_the_stated_rates_are_the_tests_own_and_a_fresh_copy():
    # Three figures, 4 candidate runs against 12: each figure at alpha/3. Fresh draws,
    # not the ones the power was simulated on.
    n, m, k, draws = 12, 4, 3, 3000
    stated, level = stated_rates(n, m, k, 0.05), 0.05 / k
    assert stated["test"] == "permutation" and stated["labelings"] == math.comb(16, 4)
    assert stated["false_rejection"] == k * math.floor(1820 * level) / 1820 <= 0.05
    rng = np.random.default_rng(7)
    fp32, null = rng.normal(size=(draws, n)), rng.normal(size=(draws, m))
    worse = null + stated["shift_noise_units"]
    called = {
        name: sum(
            t_statistic(f, c) > critical_value(f, c, level) for f, c in zip(fp32, runs, strict=True)
        )
        for name, runs in (("null", null), ("worse", worse))
    }
    per_figure = stated["false_rejection"] / k
    assert scipy_stats.binomtest(int(called["null"]), draws, per_figure).pvalue > 0.01
    assert scipy_stats.binomtest(int(called["worse"]), draws, stated["power"]).pvalue > 0.01
    stated["power"] = 0.0  # a trial's manifest holds a copy: the next one reads the rates
    assert stated_rates(n, m, k, 0.05)["power"] > 0.8


def test_too_few_labelings_for_the_level_fall_back_to_the_t_test():
    # One run against 12 has 13 labelings: none is rare enough for 5%.
    assert labelings(12, 1) == 13 and stated_rates(12, 1, 1, 0.05)["test"] == "t"
    assert critical_value([0.9, 1.0, 1.1] * 4, [1.0], 0.05) == pytest.approx(
        scipy_stats.t.ppf(0.95, 11)
    )
    assert labelings(12, 8) == 10000  # 9999 drawn and the observed one
    assert critical_value([1.0], [1.0, 2.0], 0.05) == math.inf  # no spread to measure
    # Runs that all read the same: no labeling differs, none rejects.
    assert critical_value([1.0] * 12, [1.0] * 3, 0.05) >= 0.0


@pytest.mark.parametrize("scale", [1.0, 0.1, 1 / 297, 0.37, 3.3, 1e-3])
def test_a_labeling_that_ties_the_observed_one_keeps_it_from_rejecting(scale):
    # A candidate run and an FP32 run read the same (accuracies on a grid): swapping them
    # is another labeling with the very same T, so p is 2/20 (not 1/20) and 5% is not met,
    # whatever rounding does to either T.
    fp32, candidate = [scale * v for v in (1, 0, 0)], [scale * v for v in (2, 2, 1)]
    p = scipy_stats.permutation_test(
        (fp32, candidate), t_statistic, permutation_type="independent", alternative="greater"
    ).pvalue
    assert p == pytest.approx(2 / 20)
    assert not t_statistic(fp32, candidate) > critical_value(fp32, candidate, 0.05)
