"""The selection test of the confirmation: rounds measured until decided, and the rule.

Every figure is a per-round paired ratio to FP32 (geometric mean, Student-t interval:
:mod:`precsearch.stats`). :func:`measure_rounds` asks an executor for rounds in at most
:data:`LOOKS` calls, each round in a fresh random order, until the rule is decided or a
time cap is reached; :func:`choose` is the rule at one look: a candidate wins only if its
lower confidence bound, Bonferroni-corrected for the number of candidates, clears 1
(:func:`bounds`); of those, the fastest. Every configuration is timed as two
independently built instances (:func:`instance_configs`; FP32's are the trials' timing
model and its copy), pooled per round, and the spread between instances, which more
rounds do not average away, is in every interval. :class:`Sequential`
looks after each call and spends its level over the looks (:data:`SPENDING`: at most
:data:`SCREEN` over all of them, however the rounds stop). The selection is a screen: the
winner must repeat on fresh rounds of new instances at :data:`ALPHA`
(:func:`precsearch.study.verdict.report`), the test that bounds false winners.
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
from precsearch.stats import (
    HALF_WIDTH,
    half_width,
    instance_spread,
    log_ratios,
    pooled_bounds,
    pooled_figures,
    ratio_figures,
)

__all__ = [
    "ALPHA",
    "LOOKS",
    "MAX_ROUNDS",
    "MIN_ROUNDS",
    "SPENDING",
    "SCREEN",
    "Selection",
    "Sequential",
    "bounds",
    "choose",
    "figures",
    "instance_configs",
    "instance_part",
    "instances",
    "instrument_error",
    "measure_rounds",
    "settled",
    "spread_of",
]

ALPHA = 0.05  # false winners allowed: the repeat's level on fresh rounds of new instances
# The selection's own level, over its candidates and looks: a screen for the one candidate
# the repeat then tests on new instances at ALPHA (a false winner must pass both). At 5%
# here too, a real 10% gain was found in 70% of simulated studies, at 20% in 88%, with
# false winners 0.5% and 2.25% (tests/test_selection.py).
SCREEN = 0.2
MIN_ROUNDS = 5  # rounds of the first look
MAX_ROUNDS = 60
LOOKS = 3  # calls for rounds: MIN_ROUNDS, half of what the time left holds, the rest
# The share of SCREEN each look spends (a fixed design of three looks): summing to 1, the
# selection calls a candidate faster wrongly at most SCREEN of the time over all its looks
# (a union bound), whichever look it stops at; the last look, the most rounds, gets most.
SPENDING = (0.1, 0.3, 0.6)
INSTANCES = 2  # independently built instances of each configuration, FP32 too
INSTANCE_MARK = "#"  # a configuration's second instance is "<label>#2"


def instrument_error(measured: Measurement) -> float:
    """The A/A error as a ratio ≥ 1: how far the FP32 copy's geometric-mean ratio to FP32
    (``null`` over ``fp32``) is from 1, either way."""
    logs = log_ratios(measured.rates["null"], measured.rates["fp32"])
    return math.exp(abs(sum(logs) / len(logs)))


def instance_configs(
    configs: list[tuple[str, Policy | None]], stage: str
) -> list[tuple[str, Policy | None]]:
    """``configs`` as :data:`INSTANCES` independently built instances each, for the rounds
    of ``stage`` (a new stage builds new ones): ``label`` and ``label#2``.

    The worker keeps one traced model per policy, so the instances differ in a tag in
    their policies' manifest (free data, not compared). FP32's two are ``fp32`` (the
    trials' timing model) and its copy ``null``; TensorFlow's graph rewrite (the policy
    ``None``) has one.
    """
    out: list[tuple[str, Policy | None]] = []
    for label, policy in configs:
        if policy is None or label == "fp32":
            out.append((label, policy))
            continue
        copies = 1 if label == "null" else INSTANCES
        for n in range(1, copies + 1):
            tagged = dataclasses.replace(policy, manifest={"instance": f"{stage}-{n}"})
            out.append((label if n == 1 else f"{label}{INSTANCE_MARK}{n}", tagged))
    return out


def instances(measured: Measurement, label: str) -> list[list[float]]:
    """The per-round rates of ``label``'s instances in ``measured``: ``fp32`` and
    ``null`` for FP32, else ``label``, ``label#2``, ..."""
    rates = measured.rates
    if label == "fp32":
        return [rates[x] for x in ("fp32", "null") if x in rates]
    more = sorted(x for x in rates if x.startswith(label + INSTANCE_MARK))
    return [rates[label], *(rates[x] for x in more)]


def spread_of(*measured: Measurement) -> tuple[float, int]:
    """The between-instance variance (:func:`precsearch.stats.instance_spread`) over every
    configuration measured as several instances in ``measured``."""
    groups = []
    for m in measured:
        for label in m.rates:
            if INSTANCE_MARK not in label and label != "null":
                group = instances(m, label)
                if len(group) > 1:
                    groups.append(group)
    return instance_spread(groups)


def instance_part(spread: tuple[float, int]) -> dict[str, Any]:
    """The instrument's error's instance part, from :func:`spread_of`: ``sd_percent``,
    how far an independently built instance's own offset moves its speed (one sd, in
    percent), and ``df``, the instance pairs it was estimated from."""
    variance, df = spread
    return {"sd_percent": math.expm1(math.sqrt(variance)) * 100, "df": df}


def figures(
    measured: Measurement,
    label: str,
    over: str = "fp32",
    spread: tuple[float, int] | None = None,
) -> dict[str, Any]:
    """``label``'s speed over ``over``'s, their instances pooled per round, with the
    between-instance spread in the interval (default: from ``measured`` itself)."""
    spread = spread_of(measured) if spread is None else spread
    return pooled_figures(instances(measured, label), instances(measured, over), spread)


def bounds(
    measured: Measurement,
    label: str,
    alpha: float,
    spread: tuple[float, int] | None = None,
    over: str = "fp32",
) -> tuple[float, float]:
    """``(lower, upper)``: one-sided bounds at ``1 - alpha`` of ``label``'s speed over
    ``over``'s (FP32's: ``fp32`` and ``null``), each side's instances pooled per round and
    the between-instance spread in the interval: identical instances read apart for good
    (2-4% on CPUs), which more rounds of the same instances do not average away."""
    spread = spread_of(measured) if spread is None else spread
    return pooled_bounds(instances(measured, label), instances(measured, over), alpha, spread)


@dataclasses.dataclass
class Selection:
    """The selection's outcome.

    Attributes:
        winner: The label of the winning candidate, or ``None`` (FP32 is the answer).
        bar: The A/A error in the selection's rounds (a ratio ≥ 1), for people; the
            test itself has the instances' spread in its interval (:func:`bounds`).
        candidates: Per candidate: ``label``, ``speedup_vs_fp32`` (figures), ``lower``
            and ``upper`` (its one-sided bounds at ``1 - alpha / k``), ``wins``.
        decided: Whether every candidate is decided or measured to ±3%.
    """

    winner: str | None
    bar: float
    candidates: list[dict[str, Any]]
    decided: bool


def choose(measured: Measurement, labels: list[str], alpha: float = SCREEN) -> Selection:
    """The selection rule (see the module doc) on rounds that hold ``fp32``, ``null``
    and every label in ``labels`` (with their second instances): a candidate wins when
    its lower bound at ``1 - alpha / k`` (Bonferroni over the ``k`` candidates) clears 1;
    the fastest of those is the winner."""
    spread = spread_of(measured)
    candidates = []
    decided = True
    for label in labels:
        lower, upper = bounds(measured, label, alpha / max(1, len(labels)), spread)
        speedup = figures(measured, label, spread=spread)
        wins = lower > 1
        candidates.append(
            {"label": label, "speedup_vs_fp32": speedup, "lower": lower, "upper": upper,
             "wins": wins}
        )  # fmt: skip
        decided = decided and (wins or upper < 1 or half_width(speedup) <= HALF_WIDTH)
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

    def __init__(self, labels: list[str], alpha: float = SCREEN) -> None:
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
    spread = spread_of(measured)
    copy = [ratio_figures(measured.rates["null"], measured.rates["fp32"])]
    best = [figures(measured, "best", spread=spread)] if "best" in measured.rates else []
    return all(half_width(f) <= HALF_WIDTH for f in copy + best)


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
