"""The timing instrument on fake models whose step times are known."""

from __future__ import annotations

import time

import pytest

from precsearch.engine.instrument import (
    MIN_BLOCK_S,
    Timed,
    interleave,
    step,
    step_stats,
    timed_rounds,
)


class FakeModel:
    """A 'model' whose train step sleeps a known time and logs which model ran."""

    def __init__(self, name: str, seconds: float, log: list[str]) -> None:
        self.name, self.seconds, self.log = name, seconds, log
        self.resets = 0

    def reset_metrics(self) -> None:
        self.resets += 1

    def train_function(self, iterator):
        time.sleep(self.seconds)
        self.log.append(self.name)
        return {"loss": next(iterator)}


def test_step_times_the_step_and_returns_its_own_loss():
    model = FakeModel("a", 0.02, [])
    seconds, loss = step(model, iter([0.5]))
    assert 0.02 <= seconds < 0.06 and loss == 0.5 and model.resets == 1


def test_step_stats_take_the_p10_as_the_cost():
    stats = step_stats([0.010] * 9 + [0.5], batch_size=32)
    assert stats.p10 == pytest.approx(0.010) and stats.max == 0.5 and stats.n == 10
    assert stats.samples_per_s == pytest.approx(3200)


def test_interleave_alternates_abba_and_reports_block_ratios():
    order: list[str] = []

    def side(name: str, seconds: float):
        def run() -> float:
            order.append(name)
            return seconds

        return run

    out = interleave(
        side("R", 0.010),
        side("C", 0.004),
        block=2,
        sizes=(32, 64),
        more=lambda pairs: pairs < 3,
        stopped=lambda: False,
    )
    assert "".join(order) == "RRCC" + "CCRR" + "RRCC"
    assert out.reference == [0.010] * 6 and out.candidate == [0.004] * 6
    # 64 / 4 ms over 32 / 10 ms: 5x the samples per second.
    assert out.ratios == pytest.approx([5.0, 5.0, 5.0])


def test_interleave_stops_at_a_non_finite_candidate():
    calls = []

    def candidate() -> float:
        calls.append(1)
        return 0.001

    out = interleave(
        lambda: 0.001,
        candidate,
        block=5,
        sizes=(8, 8),
        more=lambda pairs: True,
        stopped=lambda: len(calls) >= 3,
    )
    assert len(calls) == 3 and out.ratios == []


def test_rounds_shuffle_the_order_and_time_blocks_of_at_least_the_minimum():
    log: list[str] = []
    configs = [Timed(name, FakeModel(name, 0.01, log), iter(range(10**6)), 16) for name in "abc"]
    rates = timed_rounds(configs, rounds=4, block=2, warmup=1)
    assert set(rates) == {"a", "b", "c"} and all(len(v) == 4 for v in rates.values())
    for config in configs:
        # Sized from the least of three probe steps of ~10 ms; a sleep overshoots by a
        # little on a busy machine, so the block is within a tenth of the nominal 0.25 s.
        assert config.steps * 0.01 >= 0.9 * MIN_BLOCK_S
        assert all(800 < r <= 1600 for r in rates[config.label])  # 16 samples / ~10 ms
    timed = log[3 * 4 :]  # after each config's warm-up step and its three probe steps
    per_round = len(timed) // 4
    orders = {"".join(dict.fromkeys(timed[i * per_round : (i + 1) * per_round])) for i in range(4)}
    assert len(orders) > 1  # a fresh order each round, not a fixed rotation
