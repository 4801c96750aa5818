"""The intervals of precsearch/stats.py hold their level at the round counts the
selection, the repeat and a trial's blocks use (three to eight), proven on simulated
rounds many times over."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from precsearch.stats import instance_spread, pooled_bounds, ratio_bounds

ALPHA = 0.025  # each one-sided bound of a 95% interval


def misses_allowed(draws: int, alpha: float) -> int:
    """The most misses ``draws`` bounds at level ``1 - alpha`` may have and still hold it:
    the binomial's 99.9th percentile (one test in a thousand fails by chance)."""
    return int(stats.binom.ppf(0.999, draws, alpha))


def lower_misses(rounds: np.ndarray, alpha: float = ALPHA) -> int:
    """How many sets of per-round logs (one set per row, true mean 0) put their lower
    bound above the truth."""
    return sum(ratio_bounds(row, alpha)[0] > 1 for row in rounds)


def stalled_rounds(rng: np.random.Generator, draws: int, n: int) -> np.ndarray:
    """Per-round log ratios as a shared 2-core CPU gives them: 5% noise per block, and
    one block in ten (either side of the pair) stalled by 5-50%."""
    logs = rng.normal(0, 0.05, (draws, n)) - rng.normal(0, 0.05, (draws, n))
    stall = np.log(rng.uniform(1.05, 1.5, (draws, n))) * rng.choice([-1, 1], (draws, n))
    return logs + np.where(rng.random((draws, n)) < 0.1, stall, 0.0)


def test_the_one_sided_bound_at_five_log_normal_rounds_holds_its_level(figure):
    draws = 2000
    rounds = np.random.default_rng(0).normal(0, 0.08, (draws, 5))
    missed = lower_misses(rounds)
    upper = sum(ratio_bounds(row, ALPHA)[1] < 1 for row in rounds)
    figure(f"stats: 5 rounds, sd 8%: the 97.5% lower bound missed {missed}/{draws}, "
           f"the upper {upper}/{draws}")  # fmt: skip
    assert missed <= misses_allowed(draws, ALPHA) and upper <= misses_allowed(draws, ALPHA)


def test_the_bound_holds_on_stalled_rounds_at_three_five_and_eight(figure):
    rng = np.random.default_rng(1)
    draws = 2000
    for n in (3, 5, 8):
        missed = lower_misses(stalled_rounds(rng, draws, n))
        figure(f"stats: {n} stalled rounds: the 97.5% lower bound missed {missed}/{draws}")
        assert missed <= misses_allowed(draws, ALPHA)


def test_the_bca_bootstrap_it_replaces_misses_more_than_its_level_at_five_rounds(figure):
    # Why not the bootstrap: at five rounds its lower bound misses well beyond 2.5%.
    draws = 400
    rounds = np.random.default_rng(2).normal(0, 0.08, (draws, 5))
    missed = 0
    for i, row in enumerate(rounds):
        found = stats.bootstrap(
            (row,), np.mean, confidence_level=1 - 2 * ALPHA, n_resamples=999, method="BCa",
            rng=np.random.default_rng(i),
        )  # fmt: skip
        missed += found.confidence_interval.low > 0
    figure(f"stats: 5 rounds, sd 8%: BCa's 97.5% lower bound missed {missed}/{draws}")
    assert missed > misses_allowed(draws, ALPHA)


def test_bounds_at_the_edges():
    assert ratio_bounds([0.1], ALPHA) == (0.0, math.inf)
    assert ratio_bounds([0.1, 0.1, 0.1], ALPHA) == (math.exp(0.1), math.exp(0.1))
    low, high = ratio_bounds([0.0, 0.1, 0.2], ALPHA)
    reach = stats.t.ppf(1 - ALPHA, 2) * 0.1 / math.sqrt(3)
    assert math.isclose(low, math.exp(0.1 - reach)) and math.isclose(high, math.exp(0.1 + reach))


def test_pooled_bounds_with_instance_offsets_hold_their_level(figure):
    # Identical instances off by a fixed 2% sd each, 8% noise a round: the rounds' spread
    # alone misses far more than 2.5%; with the instances' spread in it, the level holds.
    rng = np.random.default_rng(3)
    draws, rounds = 1000, 20
    pooled = rounds_only = 0
    for _ in range(draws):
        # Four configurations of two instances each, all equally fast; 0 is the reference.
        offsets = rng.normal(0, 0.02, (4, 2))
        logs = (
            offsets[:, :, None] + rng.normal(0, 0.08, (4, 2, rounds)) + rng.normal(0, 0.05, rounds)
        )
        rates = np.exp(logs)
        spread = instance_spread(list(rates))
        pooled += pooled_bounds(rates[1], rates[0], ALPHA, spread)[0] > 1
        rounds_only += pooled_bounds(rates[1], rates[0], ALPHA)[0] > 1
    without = f"{rounds_only}/{draws} without the instances' spread"
    figure(f"stats: 2 instances a side (offsets 2% sd), {rounds} rounds: the 97.5% bound "
           f"missed {pooled}/{draws}, {without}")  # fmt: skip
    assert pooled <= misses_allowed(draws, ALPHA) < rounds_only
