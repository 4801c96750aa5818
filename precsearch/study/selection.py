"""The selection test of the confirmation: rounds measured until decided, and the rule.

Every figure is a per-round paired ratio to FP32 (geometric mean, bootstrap interval:
:mod:`precsearch.stats`). :func:`measure_rounds` asks an executor for rounds a few at a
time, each in a fresh random order, until the rule is decided or a time cap is reached;
:func:`choose` is the rule: a candidate wins only if its lower confidence bound,
Bonferroni-corrected for the number of candidates, clears 1 against both FP32 models
(:func:`bounds`); of those, the fastest. Its error rates are proven on simulated noise in
``tests/test_selection.py`` and measured on real models by ``benchmarks/run.py selection``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

from precsearch.policy import Policy
from precsearch.records import Measurement
from precsearch.stats import HALF_WIDTH, half_width, log_ratios, ratio_bounds, ratio_figures

__all__ = [
    "ALPHA",
    "MAX_ROUNDS",
    "MIN_ROUNDS",
    "Selection",
    "bounds",
    "choose",
    "instrument_error",
    "measure_rounds",
]

ALPHA = 0.05  # false-winner rate the selection allows, over all its candidates together
MIN_ROUNDS = 5
MORE_ROUNDS = 3  # rounds per call after the first
MAX_ROUNDS = 60


def instrument_error(measured: Measurement) -> float:
    """The A/A error as a ratio ≥ 1: how far the FP32 copy's geometric-mean ratio to FP32
    (``null`` over ``fp32``) is from 1, either way."""
    logs = log_ratios(measured.rates["null"], measured.rates["fp32"])
    return math.exp(abs(sum(logs) / len(logs)))


def bounds(measured: Measurement, label: str, alpha: float) -> tuple[float, float]:
    """``(lower, upper)``: one-sided bounds at ``1 - alpha`` of ``label``'s speed over
    FP32's that hold against both FP32 models: the lower the least of its lower bounds
    over ``fp32`` and over ``null``, the upper the least of its upper bounds.

    Clearing both copies is the A/A correction: a candidate must beat FP32 by more than
    whatever makes two identical FP32 models read apart (an intersection-union test, at
    level ``alpha`` as it stands), without a noisy bar of its own.
    """
    rates = measured.rates
    fp32 = ratio_bounds(log_ratios(rates[label], rates["fp32"]), alpha)
    null = ratio_bounds(log_ratios(rates[label], rates["null"]), alpha)
    return min(fp32[0], null[0]), min(fp32[1], null[1])


@dataclasses.dataclass
class Selection:
    """The selection's outcome.

    Attributes:
        winner: The label of the winning candidate, or ``None`` (FP32 is the answer).
        bar: The A/A error in the selection's rounds (a ratio ≥ 1), for people; the
            test itself clears both FP32 models (:func:`bounds`).
        candidates: Per candidate: ``label``, ``speedup_vs_fp32`` (figures), ``lower``
            and ``upper`` (its one-sided bounds at ``1 - alpha / k``), ``wins``.
        decided: Whether every candidate is decided or measured to ±3%.
    """

    winner: str | None
    bar: float
    candidates: list[dict[str, Any]]
    decided: bool


def choose(measured: Measurement, labels: list[str], alpha: float = ALPHA) -> Selection:
    """The selection rule (see the module doc) on rounds that hold ``fp32``, ``null``
    and every label in ``labels``: a candidate wins when its lower bound at
    ``1 - alpha / k`` (Bonferroni over the ``k`` candidates) clears 1 against both FP32
    models; the fastest of those is the winner."""
    fp32 = measured.rates["fp32"]
    candidates = []
    decided = True
    for label in labels:
        lower, upper = bounds(measured, label, alpha / max(1, len(labels)))
        figures = ratio_figures(measured.rates[label], fp32)
        wins = lower > 1
        candidates.append(
            {"label": label, "speedup_vs_fp32": figures, "lower": lower, "upper": upper,
             "wins": wins}
        )  # fmt: skip
        decided = decided and (wins or upper < 1 or half_width(figures) <= HALF_WIDTH)
    winners = [c for c in candidates if c["wins"]]
    best = max(winners, key=lambda c: c["speedup_vs_fp32"]["estimate"], default=None)
    bar = instrument_error(measured)
    return Selection(best["label"] if best else None, bar, candidates, decided)


def measure_rounds(
    executor: Any,
    configs: list[tuple[str, Policy | None]],
    rng: Any,
    block: int,
    seconds: float,
    done: Callable[[Measurement], bool],
    clock: Callable[[], float] = time.monotonic,
) -> Measurement:
    """Rounds of ``configs`` until ``done`` says so, :data:`MAX_ROUNDS` are measured or
    ``seconds`` have passed (at least :data:`MIN_ROUNDS`); each round's order is a fresh
    permutation from ``rng`` (a numpy Generator), recorded in the result."""
    labels = [label for label, _ in configs]
    total = Measurement(rates={label: [] for label in labels}, orders=[])
    start = clock()
    while True:
        count = MORE_ROUNDS if total.orders else MIN_ROUNDS
        orders = [[labels[i] for i in rng.permutation(len(labels))] for _ in range(count)]
        part = executor.confirm(configs, orders, block)
        for label in labels:
            total.rates[label] += part.rates[label]
        total.orders += part.orders
        total.steps = part.steps
        if len(total.orders) >= MAX_ROUNDS or clock() - start >= seconds or done(total):
            return total
