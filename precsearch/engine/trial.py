"""One trial: train a candidate policy, time it against FP32, judge it against FP32.

The side a candidate is measured against is always the *user's own training* in FP32:
their batch size, XLA setting and steps per call (:meth:`Problem.baseline()
<precsearch.engine.problem.Problem.baseline>`). :func:`train_time_and_judge`

1. builds the candidate from the initial weights under the policy and traces it; stops
   if its first call after tracing costs over ``budget.watchdog`` times FP32's per sample;
2. times it against the already traced FP32 model in alternating blocks of calls, each
   at least ``budget.block_time`` (``--block-time``) long
   (:func:`~precsearch.engine.instrument.interleave`), the candidate training on from
   the same data order as the FP32 runs: the speedup is the geometric mean of the pairs'
   ratios, with its Student-t interval, as in the confirmation. From three pairs on,
   once it is confidently slower than FP32, or than the study's best feasible trial so
   far (``budget.stop_below``: a trial that cannot reach it cannot be the answer), it
   stops as ``too_slow`` (:func:`precsearch.stats.confidently_slower`; never the user's
   FP32, nor with ``budget.stop_slow`` off); until ±3% or ``budget.max_blocks``;
3. trains on to the budget's samples, evaluating validation data there, and on up to
   1.5x the budget while its smoothed loss has not reached FP32's quality target;
4. trains again on its own data-order seeds, untimed, as many as the test's power needs
   (:func:`~precsearch.engine.references.candidate_runs`); judges its runs against
   FP32's at equal samples (:func:`~precsearch.engine.fidelity.judge`), with its time to
   FP32's quality and (other batch size or XLA) its FP32 twin, trained only now;
5. records the gradient's norm on one batch (global, per layer), outside the timed steps.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from precsearch.engine.fidelity import (
    TTQ_REACH,
    better_note,
    crossing,
    judge,
    judge_twin,
    precision_gap,
    quality_target,
    smoothed,
    time_to_quality,
)
from precsearch.engine.instrument import Interleaved, block_steps, interleave, step, step_stats
from precsearch.engine.memory import PeakMemory
from precsearch.engine.problem import Problem
from precsearch.engine.quality_test import stated_rates
from precsearch.engine.references import candidate_runs, runs_on_own_seeds
from precsearch.policy import Policy
from precsearch.policy.layers import scalar
from precsearch.records import Budget, Fidelity, Reference, TrialResult
from precsearch.stats import HALF_WIDTH, confidently_slower, half_width, log_figures

__all__ = ["MIN_PAIRS", "TrialSetup", "train_time_and_judge"]

MIN_PAIRS = 3  # block pairs timed before a trial may stop as too slow


@dataclass(frozen=True)
class TrialSetup:
    """What a candidate is trained, timed and judged against, and with.

    Attributes:
        problem: The model and data.
        budget: Samples (as steps at the user's batch size), warm-up, blocks, watchdog.
        fidelity: What counts as training like FP32.
        reference: The user's FP32 training, one run per data-order seed: the noise.
        fp32: A traced FP32 model of the user's training and its data stream: the side
            every candidate is timed against.
        memory: The trial's peak-memory mark (set before its references ran).
        fp32_twin: Gives one FP32 run at the candidate's batch size and XLA setting
            (seed 0, as the candidate), when those differ from the user's. Called only
            for a candidate that trained to the end (its time is the trial's
            ``reference`` timing), with the candidate's own run when the candidate is
            FP32 (that run is its twin; none is trained), else with ``None``.
        context: Wraps every candidate call (TensorFlow's graph rewrite is a setting
            that applies to the functions called while it is on).
        build: Makes the candidate's model (default :meth:`Problem.model_for`).
        clock: Reads the time of every timed call, in seconds.
    """

    problem: Problem
    budget: Budget
    fidelity: Fidelity
    reference: Reference
    fp32: tuple[Any, Any]
    memory: PeakMemory
    fp32_twin: Callable[[Reference | None], Reference] | None = None
    context: Callable[[], Any] = contextlib.nullcontext
    build: Callable[..., Any] | None = None
    clock: Callable[[], float] = time.perf_counter

    @property
    def fp32_per_call(self) -> int:
        """Samples in one call of the user's FP32 training."""
        return self.problem.batch_size * self.problem.steps_per_execution

    def fp32_step(self) -> float:
        """One timed call of the user's FP32 training: its seconds."""
        return step(*self.fp32, self.clock)[0]


class _Candidate:
    """A candidate model being trained: its calls, losses, loss scale and validation."""

    def __init__(self, policy: Policy, setup: TrialSetup) -> None:
        problem = setup.problem
        self.problem, self.clock, self.context = problem, setup.clock, setup.context
        self.batch_size = policy.batch_size or problem.batch_size
        self.model = (setup.build or problem.model_for)(policy, seed=0)
        self.start = [v.numpy() for v in self.model.optimizer.variables]  # for its own seeds
        self.iterator = problem.iterator(self.batch_size, seed=0)
        self.per_call = self.batch_size * problem.steps_per_execution
        self.end = setup.reference.span()
        keras = problem.keras
        self.lso = isinstance(self.model.optimizer, keras.optimizers.LossScaleOptimizer)
        self.losses: list[float] = []
        self.scales: list[float] = []
        self.skipped = 0
        self.nonfinite_step: int | None = None
        self.val: dict[str, Any] = {}
        self.evaluated_at: int | None = None

    @property
    def stopped(self) -> bool:
        return self.nonfinite_step is not None

    def step(self) -> float:
        """One timed call; the loss and loss scale are recorded, and validation runs
        once the budget's samples are seen (outside the timed call)."""
        optimizer = self.model.optimizer
        before = scalar(optimizer.dynamic_scale) if self.lso else None
        with self.context():
            seconds, loss = step(self.model, self.iterator, self.clock)
        self.losses.append(loss)
        if self.lso:
            after = scalar(optimizer.dynamic_scale)
            self.scales.append(after)
            if before is not None and after < before:
                self.skipped += 1
        if not math.isfinite(loss) and not self.stopped:
            self.nonfinite_step = len(self.losses)
        elif len(self.losses) * self.per_call >= self.end and self.evaluated_at is None:
            # Validation at equal samples, as the FP32 runs were.
            self.val = self.problem.evaluate(self.model, self.batch_size)
            self.evaluated_at = len(self.losses) * self.per_call
        return seconds

    def samples(self) -> list[int]:
        return [self.per_call * (i + 1) for i in range(len(self.losses))]

    def record(self, result: TrialResult) -> None:
        """Write what was trained into ``result``: the curve, validation, numerics; up
        to 1.5x the budget, for the time to quality (timed blocks train far past it)."""
        kept = sum(1 for s in self.samples() if s <= TTQ_REACH * self.end) or len(self.losses)
        result.curve = {"batch_size": self.batch_size, "samples": self.samples()[:kept],
                        "loss": self.losses[:kept]}  # fmt: skip
        result.val = self.val
        numerics = result.numerics
        numerics["nonfinite_step"] = self.nonfinite_step
        if self.evaluated_at is not None:
            numerics["evaluated_at"] = self.evaluated_at
        if self.lso:
            numerics["loss_scale"] = self.scales[:kept]  # one per point of the curve
            numerics["min_loss_scale"] = min(self.scales) if self.scales else None
        numerics["skipped_steps"] = self.skipped
        numerics["skipped_share"] = self.skipped / max(1, len(self.losses))

    def nonfinite(self) -> str:
        return f"non-finite loss at step {self.nonfinite_step}"


def _watchdog(candidate: _Candidate, setup: TrialSetup, result: TrialResult) -> str:
    """Why the candidate stops at once ("" when it goes on): its first call after
    tracing, per sample, against FP32 measured now."""
    fp32_now = min(setup.fp32_step() for _ in range(2))
    first = candidate.step()
    slowdown = (first / candidate.per_call) / (fp32_now / setup.fp32_per_call)
    result.numerics["watchdog_slowdown"] = slowdown
    watchdog = setup.budget.watchdog
    if not slowdown > watchdog:
        return ""
    return (
        f"first step after tracing {slowdown:.1f}x slower than FP32 per sample "
        f"({first * 1e3:.1f} ms vs {fp32_now * 1e3:.1f} ms; watchdog {watchdog:g}x)"
    )


def _time_blocks(
    candidate: _Candidate, setup: TrialSetup, may_stop: bool
) -> tuple[Interleaved, bool]:
    """Interleaved blocks of FP32 and the candidate; whether it stopped as too slow."""
    budget = setup.budget
    probe = min(setup.fp32_step() for _ in range(3))
    cand_probe = min(candidate.step() for _ in range(2))
    block = max(block_steps(s, budget.block, budget.block_time) for s in (probe, cand_probe))
    verdict = {"slow": False}

    def more(pairs: int, ratios: list[float]) -> bool:
        if pairs < MIN_PAIRS:
            return True
        logs = [math.log(r) for r in ratios]
        look = pairs - MIN_PAIRS + 1
        if may_stop and confidently_slower(logs, look=look, bar=budget.stop_below):
            verdict["slow"] = True
            return False
        figures = log_figures(logs)
        precise = half_width(figures) <= HALF_WIDTH
        return not precise and (budget.max_blocks is None or pairs < budget.max_blocks)

    blocks = interleave(
        setup.fp32_step,
        candidate.step,
        block=block,
        sizes=(setup.fp32_per_call, candidate.per_call),
        more=more,
        stopped=lambda: candidate.stopped,
    )
    return blocks, verdict["slow"]


def _record_speed(result: TrialResult, blocks: Interleaved, candidate: _Candidate) -> None:
    """The timed blocks' figures: step times, step statistics, the speedup."""
    problem = candidate.problem
    k = problem.steps_per_execution
    result.step_times = {"fp32": blocks.reference, "candidate": blocks.candidate}
    if blocks.reference and blocks.candidate:
        result.fp32 = step_stats(blocks.reference, problem.batch_size, k)
        result.candidate = step_stats(blocks.candidate, candidate.batch_size, k)
    if blocks.ratios:
        figures = log_figures([math.log(r) for r in blocks.ratios])
        result.block_ratios = figures
        result.speedup = figures["estimate"]


def _slower_than_the_bar(result: TrialResult, budget: Budget) -> str:
    """Why a trial confidently slower than the bar stopped."""
    bar = "FP32"
    if budget.stop_below != 1:
        bar = f"the best feasible trial's {budget.stop_below:.2f}x"
    ratios = result.block_ratios
    return (
        f"confidently slower than {bar} after {ratios['rounds']} block pairs: "
        f"{ratios['estimate']:.2f}x ({ratios['low']:.2f}-{ratios['high']:.2f})"
    )


def _train_on(candidate: _Candidate, calls: int, reference: Reference) -> None:
    """Train to the budget's calls, then on (up to 1.5x the budget) while the smoothed
    loss has not reached FP32's quality target (the worst FP32 run's final smoothed
    loss), so that the time to quality is measured rather than censored."""
    while len(candidate.losses) < calls and not candidate.stopped:
        candidate.step()
    target = quality_target(reference)
    if target is None:
        return
    width = reference.span() / 4
    limit = math.ceil(TTQ_REACH * calls)
    while len(candidate.losses) < limit and not candidate.stopped:
        samples = candidate.samples()
        if crossing(samples, smoothed(samples, candidate.losses, width), target) is not None:
            return
        candidate.step()


def _as_fp32_run(
    candidate: _Candidate, policy: Policy, reference: Reference, calls: int
) -> Reference:
    """An FP32 candidate's training to the budget's ``calls``, as an FP32 run with its
    seed: its own twin."""
    val = candidate.val
    return Reference(
        batch_size=candidate.batch_size,
        lr_rule=policy.lr_rule,
        jit_compile=policy.jit_compile,
        steps=calls,
        samples_per_call=candidate.per_call,
        curves=[candidate.losses[:calls]],
        val_loss=[val.get("loss")],
        val_metric=[val.get("metric")],
        metric_name=val.get("metric_name"),
        seeds=[0],
        initial=reference.initial,
    )


def _low(policy: Policy) -> bool:
    """Whether any rule of ``policy`` asks for a low-precision dtype."""
    return any(d != "float32" for d in policy.rule_dtypes())


def _is_users(policy: Policy, problem: Problem) -> bool:
    """Whether ``policy`` is the user's own FP32 training (batch size, XLA, float32)."""
    users = (problem.batch_size, problem.jit_compile)
    return (policy.batch_size, policy.jit_compile) == users and not _low(policy)


def _judge(result: TrialResult, candidate: _Candidate, policy: Policy, setup: TrialSetup) -> None:
    """Judge a candidate that trained to the end against the user's FP32 runs, with its
    time to quality and, when it has one, against its FP32 twin (trained only now). The
    user's own FP32 training is what the others are judged by: its gap is a figure, never
    a verdict (the test calls FP32 worse 5% of the time)."""
    reference, fidelity, timings = setup.reference, setup.fidelity, result.timings
    t0, problem = time.perf_counter(), setup.problem
    calls = setup.budget.calls(candidate.per_call, problem.batch_size, timed=False)
    result.numerics["runs"] = runs = runs_on_own_seeds(problem, candidate.model, candidate.start,
        calls, policy, candidate.context, candidate_runs(reference, fidelity))  # fmt: skip
    timings["total"] += (own_seeds_s := time.perf_counter() - t0)
    timings["own_seeds"] = own_seeds_s
    status, reason, gap, gaps = judge(result, reference, fidelity)
    if setup.build is None and _is_users(policy, problem) and math.isfinite(gap):
        status, reason = "ok", ""
    result.numerics["test"] = stated_rates(len(reference.curves), 1 + len(runs), len(gaps),
                                           fidelity.alpha, fidelity.tolerance)  # fmt: skip
    result.status, result.reason = status, reason or better_note(gaps)
    result.fidelity_gap = gap if math.isfinite(gap) else None
    result.numerics["gaps"] = gaps
    result.time_to_quality = time_to_quality(result, reference)
    result.time_to_quality["trace_s"] = timings["trace"]
    if setup.fp32_twin is None:
        return
    t0, is_own_twin = time.perf_counter(), not (_low(policy) or setup.build)  # an FP32 policy
    run = _as_fp32_run(candidate, policy, reference, calls) if is_own_twin else None
    twin = setup.fp32_twin(run)
    timings["reference"] = time.perf_counter() - t0
    timings["total"] += timings["reference"]
    result.precision_gap = precision_gap(result, twin, reference, fidelity)
    result.twin = judge_twin(twin, reference, fidelity)


def train_time_and_judge(policy: Policy, setup: TrialSetup) -> TrialResult:
    """Train and time one candidate against FP32, and judge it (see the module doc).

    Args:
        policy: The candidate, its batch sizes filled in (:meth:`Problem.normalise`).
        setup: What it is measured against, and with.
    """
    t_start = time.perf_counter()
    problem, budget = setup.problem, setup.budget
    result = TrialResult(policy=policy.to_dict(), memory_kind=setup.memory.kind)
    timings = result.timings

    t0 = time.perf_counter()
    cand = _Candidate(policy, setup)
    timings["build"] = time.perf_counter() - t0

    def finish(status: str, reason: str) -> TrialResult:
        result.status, result.reason = status, reason
        cand.record(result)
        result.peak_memory_mb = setup.memory.mb()
        timings["total"] = time.perf_counter() - t_start
        return result

    t0 = time.perf_counter()
    cand.step()
    timings["trace"] = time.perf_counter() - t0
    if cand.stopped:
        return finish("infeasible", cand.nonfinite())

    t0 = time.perf_counter()
    too_slow = _watchdog(cand, setup, result)
    for _ in range(0 if too_slow else budget.warmup):
        if cand.stopped:
            break
        cand.step()
    timings["warmup"] = time.perf_counter() - t0
    if too_slow:
        return finish("too_slow", too_slow)
    if cand.stopped:
        return finish("infeasible", cand.nonfinite())

    t0 = time.perf_counter()
    baseline = setup.build is None and _is_users(policy, problem)
    blocks, slow = _time_blocks(cand, setup, may_stop=budget.stop_slow and not baseline)
    timings["measured"] = time.perf_counter() - t0
    _record_speed(result, blocks, cand)
    if cand.stopped:
        return finish("infeasible", cand.nonfinite())
    if slow:
        return finish("too_slow", _slower_than_the_bar(result, budget))

    t0 = time.perf_counter()
    _train_on(cand, budget.calls(cand.per_call, problem.batch_size), setup.reference)
    timings["train"] = time.perf_counter() - t0
    if cand.stopped:
        return finish("infeasible", cand.nonfinite())

    t0 = time.perf_counter()
    if cand.evaluated_at is None:
        cand.val = problem.evaluate(cand.model, cand.batch_size)
    if problem.strategy is None:  # one batch, eagerly: replicas would need a run() each
        result.gradient_norms = problem.gradient_norms(cand.model, cand.batch_size)
    timings["evaluate"] = time.perf_counter() - t0
    finish("ok", "")
    _judge(result, cand, policy, setup)
    return result
