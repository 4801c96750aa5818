"""The selection test (study/selection.py) on scripted and simulated rounds.

Its rates (false winners, power) are proven here on simulated noise, many studies each;
``benchmarks/run.py selection`` measures them on real models.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from precsearch import Policy
from precsearch.records import Measurement
from precsearch.study.selection import (
    ALPHA,
    LOOKS,
    MIN_ROUNDS,
    Sequential,
    choose,
    measure_rounds,
    settled,
)
from precsearch.study.verdict import report

FP32 = Policy(batch_size=32)
BF16 = Policy(default="mixed_bfloat16", batch_size=32)


def measured(**rates: list[float]) -> Measurement:
    return Measurement(rates=rates)


def wobble(level: float, n: int = 8, seed: int = 0, sd: float = 0.01) -> list[float]:
    """``n`` rates around ``level``, a little noise each."""
    rng = np.random.default_rng(seed)
    return list(level * np.exp(rng.normal(0, sd, size=n)))


def test_a_candidate_within_the_noise_is_not_called_faster():
    # 2.5% faster on average, but rounds that swing ±10%: its lower bound is under 1.
    fp32 = wobble(100, 6, seed=2)
    swings = [0.15, -0.09, 0.12, -0.05, 0.10, -0.08]
    m = measured(
        fp32=fp32, null=list(fp32), c0=[x * math.exp(d) for x, d in zip(fp32, swings, strict=True)]
    )
    selection = choose(m, ["c0"])
    assert selection.winner is None and selection.bar == pytest.approx(1.0)
    entry = selection.candidates[0]
    assert entry["speedup_vs_fp32"]["estimate"] == pytest.approx(math.exp(0.025))
    assert entry["lower"] < 1 < entry["upper"] and not entry["wins"]


def test_the_fastest_candidate_whose_lower_bound_clears_the_bar_wins():
    fp32 = wobble(100, seed=3)
    m = measured(
        fp32=fp32,
        null=[x * 1.002 for x in fp32],
        c0=[x * 1.5 for x in wobble(1, seed=4)],
        c1=[x * 1.2 for x in wobble(1, seed=5)],
    )
    m.rates["c0"] = [a * b for a, b in zip(fp32, m.rates["c0"], strict=True)]
    m.rates["c1"] = [a * b for a, b in zip(fp32, m.rates["c1"], strict=True)]
    selection = choose(m, ["c0", "c1"])
    assert selection.winner == "c0" and selection.bar == pytest.approx(1.002)
    assert all(c["wins"] for c in selection.candidates) and selection.decided


class SimulatedMachine:
    """Rounds as a shared 2-core CPU gives them: a common drift per round, 3% noise per
    block, and one block in ten stalled by 5-50%; the true speeds are known."""

    def __init__(self, speeds: dict[str, float], seed: int) -> None:
        self.speeds = speeds
        self.rng = np.random.default_rng(seed)

    def confirm(self, configs, orders, block):
        rates: dict[str, list[float]] = {label: [] for label, _ in configs}
        for order in orders:
            drift = self.rng.normal(0, 0.05)
            for label in order:
                stall = self.rng.uniform(1.05, 1.5) if self.rng.random() < 0.1 else 1.0
                noise = math.exp(drift + self.rng.normal(0, 0.03))
                rates[label].append(100 * self.speeds[label] / (noise * stall))
        return Measurement(rates=rates, orders=orders)


class RoundClock:
    """A clock that advances 2 s per round measured: the time cap without waiting."""

    def __init__(self, machine: SimulatedMachine) -> None:
        self.machine, self.rounds = machine, 0

    def __call__(self) -> float:
        return 2.0 * self.rounds


def select_and_repeat(speeds: dict[str, float], seed: int, seconds: float = 60.0) -> str | None:
    """One study's confirmation on simulated rounds: the selection, then the winner
    repeated on fresh rounds; the label of the answer (``None``: FP32)."""
    machine = SimulatedMachine(speeds, seed)
    clock = RoundClock(machine)
    original = machine.confirm

    def counted(configs, orders, block):
        clock.rounds += len(orders)
        return original(configs, orders, block)

    machine.confirm = counted
    rng = np.random.default_rng(seed)
    labels = [label for label in speeds if label.startswith("c")]
    configs = [(label, None) for label in speeds]
    sequential = Sequential(labels)  # the confirmation's own stopping rules, both stages
    measure_rounds(machine, configs, rng, 10, seconds, sequential, clock)
    winner = sequential.selection.winner
    if winner is None:
        return None
    machine.speeds = {**speeds, "best": speeds[winner]}
    fresh_configs = [("fp32", None), ("null", None), ("best", None)]
    fresh = measure_rounds(machine, fresh_configs, rng, 10, seconds, settled, clock)
    best, _ = report(fresh, BF16, FP32, {})
    return winner if best["answer"] == "winner" else None


@pytest.mark.slow
def test_at_most_five_percent_of_studies_crown_a_candidate_that_is_fp32(figure):
    # Three candidates that are FP32 under other labels: any winner is a false one.
    speeds = {"fp32": 1.0, "null": 1.0, "c0": 1.0, "c1": 1.0, "c2": 1.0}
    studies = 200
    false = sum(select_and_repeat(speeds, seed) is not None for seed in range(studies))
    figure(f"selection: false winners {false}/{studies} with 3 candidates equal to FP32")
    assert false / studies <= ALPHA


@pytest.mark.slow
def test_a_real_ten_percent_gain_is_found_in_at_least_eighty_percent_of_studies(figure):
    speeds = {"fp32": 1.0, "null": 1.0, "c0": 1.10, "c1": 1.0, "c2": 1.0}
    studies = 100
    found = sum(select_and_repeat(speeds, 1000 + seed) == "c0" for seed in range(studies))
    figure(f"selection: a 10% gain found in {found}/{studies} studies (3 candidates)")
    assert found / studies >= 0.8


def test_rounds_come_in_three_looks_that_fill_the_time_cap_and_record_their_orders():
    machine = SimulatedMachine({"fp32": 1.0, "null": 1.0, "c0": 1.0}, seed=0)
    clock = RoundClock(machine)
    original, calls = machine.confirm, []

    def counted(configs, orders, block):
        calls.append(len(orders))
        clock.rounds += len(orders)
        return original(configs, orders, block)

    machine.confirm = counted
    configs = [("fp32", None), ("null", None), ("c0", None)]
    m = measure_rounds(machine, configs, np.random.default_rng(0), 10, 60.0, lambda m: False, clock)
    # 2 s a round: 5 rounds, then half the 25 the 50 s left hold, then the rest.
    assert calls == [MIN_ROUNDS, 13, 12] and len(calls) == LOOKS and clock() == 60.0
    assert all(sorted(order) == ["c0", "fp32", "null"] for order in m.orders)
    assert len({tuple(order) for order in m.orders}) > 1  # a fresh order each round
    assert all(len(rates) == len(m.orders) for rates in m.rates.values())


def test_a_first_look_that_used_the_time_is_the_last():
    machine = SimulatedMachine({"fp32": 1.0, "null": 1.0}, seed=0)
    ticks = iter([0.0, 70.0])
    configs = [("fp32", None), ("null", None)]
    m = measure_rounds(
        machine, configs, np.random.default_rng(0), 10, 60.0, lambda m: False,
        lambda: next(ticks),
    )  # fmt: skip
    assert len(m.orders) == MIN_ROUNDS


def test_the_selection_spends_its_false_winner_rate_over_its_looks():
    # The same evidence wins at the last look's share of alpha, not at the first's.
    fp32 = wobble(100, 10, seed=20, sd=0.05)
    gains = wobble(1.03, 10, seed=21, sd=0.03)
    m = measured(fp32=fp32, null=list(fp32), c0=[a * g for a, g in zip(fp32, gains, strict=True)])
    first, last = Sequential(["c0"]), Sequential(["c0"])
    first(m)
    for _ in range(LOOKS):
        last(m)
    assert not first.selection.winner and last.selection.winner == "c0"
    with pytest.raises(ValueError, match="looks"):
        last(m)
