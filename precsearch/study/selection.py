"""The selection test of the confirmation: rounds measured until decided, and the rule.

Every figure is a per-round paired ratio to FP32 (geometric mean, Student-t interval:
:mod:`precsearch.stats`). :func:`measure_rounds` asks an executor for rounds in at most
:data:`LOOKS` calls, each round in a fresh random order, until the rule is decided or a
time cap is reached; :func:`choose` is the rule at one look: a candidate wins only if its
lower confidence bound, Bonferroni-corrected for the number of candidates, clears 1
against both FP32 models (:func:`bounds`); of those, the fastest. :class:`Sequential`
looks after each call and spends the false-winner rate over the looks
(:data:`SPENDING`: at most :data:`ALPHA` over all of them, however the rounds stop).
Its error rates are proven on simulated noise, with the real stopping rules, in
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
    "LOOKS",
    "MAX_ROUNDS",
    "MIN_ROUNDS",
    "SPENDING",
    "Selection",
    "Sequential",
    "bounds",
    "choose",
    "instrument_error",
    "measure_rounds",
    "settled",
]

ALPHA = 0.05  # false-winner rate the selection allows, over all its candidates and looks
MIN_ROUNDS = 5  # rounds of the first look
MAX_ROUNDS = 60
LOOKS = 3  # calls for rounds: MIN_ROUNDS, half of what the time left holds, the rest
# The share of ALPHA each look spends (a fixed design of three looks): summing to 1, the
# selection calls a candidate faster wrongly at most ALPHA of the time over all its looks
# (a union bound), whichever look it stops at; the last look, the most rounds, gets most.
SPENDING = (0.1, 0.3, 0.6)


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


class Sequential:
    """The selection's stopping rule and its outcome: given to :func:`measure_rounds` as
    ``done``, it applies :func:`choose` after each call for rounds, look ``k`` at level
    ``alpha * SPENDING[k - 1]``, and says whether the selection is decided.

    Attributes:
        labels: The candidates' labels.
        alpha: The false-winner rate over all looks.
        looks: The looks taken so far.
        selection: The outcome at the last look (``None`` before the first).
    """

    def __init__(self, labels: list[str], alpha: float = ALPHA) -> None:
        self.labels, self.alpha = labels, alpha
        self.looks = 0
        self.selection: Selection | None = None

    def __call__(self, measured: Measurement) -> bool:
        self.looks += 1
        if self.looks > len(SPENDING):
            raise ValueError(f"look {self.looks}: the selection spends over {LOOKS} looks")
        level = self.alpha * SPENDING[self.looks - 1]
        self.selection = choose(measured, self.labels, level)
        return self.selection.decided


def settled(measured: Measurement) -> bool:
    """The repeat's stopping rule: whether the fresh rounds read the copy and the winner
    to within the half width. It looks at the intervals' widths, not where they lie, so
    stopping on it does not bias the one test made at the end."""
    shown = [label for label in ("null", "best") if label in measured.rates]
    fp32 = measured.rates["fp32"]
    return all(half_width(ratio_figures(measured.rates[x], fp32)) <= HALF_WIDTH for x in shown)


def measure_rounds(
    executor: Any,
    configs: list[tuple[str, Policy | None]],
    rng: Any,
    block: int,
    seconds: float,
    done: Callable[[Measurement], bool],
    clock: Callable[[], float] = time.monotonic,
) -> Measurement:
    """Rounds of ``configs`` in at most :data:`LOOKS` calls: :data:`MIN_ROUNDS`, then half
    the rounds the time left holds (at the rounds' pace so far), then the rest, until
    ``done`` says so (it is asked after every call, the last too), :data:`MAX_ROUNDS` are
    measured or ``seconds`` have passed; each round's order is a fresh permutation from
    ``rng`` (a numpy Generator), recorded in the result."""
    labels = [label for label, _ in configs]
    total = Measurement(rates={label: [] for label in labels}, orders=[])
    start = clock()
    count = MIN_ROUNDS
    for look in range(1, LOOKS + 1):
        orders = [[labels[i] for i in rng.permutation(len(labels))] for _ in range(count)]
        part = executor.confirm(configs, orders, block)
        for label in labels:
            total.rates[label] += part.rates[label]
        total.orders += part.orders
        total.steps = part.steps
        rounds = len(total.orders)
        if done(total) or rounds >= MAX_ROUNDS:
            break
        elapsed = clock() - start
        fits = MAX_ROUNDS if elapsed <= 0 else int((seconds - elapsed) * rounds / elapsed)
        fits = min(fits, MAX_ROUNDS - rounds)
        if fits < 1:
            break
        count = fits if look == LOOKS - 1 else max(1, (fits + 1) // 2)
    return total
