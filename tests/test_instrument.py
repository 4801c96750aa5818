"""The timing instrument on fake models whose step times are known, on a fake clock."""

from __future__ import annotations

import random

import pytest

from precsearch.engine.instrument import (
    MIN_BLOCK_S,
    Timed,
    interleave,
    prepare,
    step,
    step_stats,
    timed_rounds,
)


class FakeClock:
    """Seconds that pass only when a fake model says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Loss:
    """A loss tensor whose read-back waits for the step: ``wait`` seconds."""

    def __init__(self, value: float, clock: FakeClock, wait: float) -> None:
        self.value, self.clock, self.wait = value, clock, wait

    def __float__(self) -> float:
        self.clock.now += self.wait
        return float(self.value)


class FakeModel:
    """A 'model' whose train call takes ``seconds`` of the clock (``stalls``: extra
    seconds on given calls, counted from 1) and logs which model ran."""

    RESET_S = 1.0  # a metric reset far dearer than a step: outside the timer or seen

    def __init__(
        self,
        name: str,
        seconds: float,
        log: list[str],
        clock: FakeClock,
        wait: float = 0.0,
        stalls: dict[int, float] | None = None,
    ) -> None:
        self.name, self.seconds, self.log, self.clock = name, seconds, log, clock
        self.wait, self.stalls = wait, stalls or {}
        self.resets = self.calls = 0

    def reset_metrics(self) -> None:
        self.resets += 1
        self.clock.now += self.RESET_S

    def train_function(self, iterator):
        self.calls += 1
        self.clock.now += self.seconds + self.stalls.get(self.calls, 0.0)
        self.log.append(self.name)
        return {"loss": Loss(next(iterator), self.clock, self.wait)}


def test_step_times_the_call_and_its_read_back_and_returns_its_own_loss():
    clock = FakeClock()
    model = FakeModel("a", 0.02, [], clock, wait=0.005)
    seconds, loss = step(model, iter([0.5]), clock)
    # The call and the wait for its loss; not the metric reset before it.
    assert seconds == pytest.approx(0.025) and loss == 0.5 and model.resets == 1
    assert clock.now == pytest.approx(FakeModel.RESET_S + 0.025)


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
        more=lambda pairs, ratios: pairs < 3,
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
        more=lambda pairs, ratios: True,
        stopped=lambda: len(calls) >= 3,
    )
    assert len(calls) == 3 and out.ratios == []


def test_blocks_are_sized_from_the_least_probe_step_and_rounds_follow_their_orders():
    clock = FakeClock()
    log: list[str] = []
    # Step times that binary fractions hold exactly; "a" stalls in its first probe step
    # (its second call, after one warm-up call).
    models = {
        "a": FakeModel("a", 1 / 64, log, clock, stalls={2: 0.5}),
        "b": FakeModel("b", 1 / 64, log, clock),
        "c": FakeModel("c", 1 / 32, log, clock),
    }
    configs = [Timed(name, model, iter(range(10**6)), 16) for name, model in models.items()]
    for config in configs:
        prepare(config, block=2, warmup=1, clock=clock)
    # At least MIN_BLOCK_S of steps: 32 of 1/64 s (the stall not counted), 16 of 1/32 s.
    assert MIN_BLOCK_S == 0.5
    assert [config.steps for config in configs] == [32, 32, 16]
    assert [model.calls for model in models.values()] == [4, 4, 4]  # warm-up, 3 probes
    log.clear()
    rng = random.Random(0)
    orders = [rng.sample("abc", 3) for _ in range(4)]
    rates = timed_rounds(configs, orders, clock=clock)
    # 16 samples per call over the p10 call of each block, exactly.
    assert rates == {"a": [1024.0] * 4, "b": [1024.0] * 4, "c": [512.0] * 4}
    # Each round: every configuration once, in that round's order, one untimed call first.
    steps = {config.label: config.steps for config in configs}
    assert log == [name for order in orders for name in order for _ in range(1 + steps[name])]


def test_blocks_are_at_least_the_block_size():
    clock = FakeClock()
    slow = Timed("slow", FakeModel("slow", 1.0, [], clock), iter(range(100)), 8)
    assert prepare(slow, block=4, warmup=0, clock=clock).steps == 4  # 0.5 s is one call


def test_blocks_last_the_block_time_asked_for():
    clock = FakeClock()
    fast = Timed("fast", FakeModel("fast", 1 / 64, [], clock), iter(range(10**6)), 8)
    assert prepare(fast, block=2, warmup=0, clock=clock, least_s=0.125).steps == 8
    assert prepare(fast, block=2, warmup=0, clock=clock, least_s=2.0).steps == 128
