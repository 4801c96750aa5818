"""One trial: train a candidate policy, time it against FP32, judge it against FP32.

The side a candidate is measured against is always the *user's own training* in FP32:
their batch size, XLA setting and steps per call (:meth:`Problem.baseline()
<precsearch.engine.problem.Problem.baseline>`). :func:`run_trial`

1. builds the candidate from the problem's initial weights, applies the policy,
   recompiles;
2. traces it (first call), and stops at once if the first call after tracing costs more
   than ``budget.watchdog`` times the FP32 call per sample (``too_slow``);
3. trains it on the budget's samples (as many calls as its batch size needs, at least
   enough for one timed block) from the same data order as the FP32 training, its first
   blocks of calls alternating with blocks of the already traced FP32 model
   (:func:`precsearch.engine.instrument.interleave`), every call timed;
4. estimates each side's cost as the p10 of its call times, with the median, min, max
   and count beside it, and the per-block ratios as the spread;
5. records the loss per call by samples seen, the dynamic loss scale and skipped steps,
   stops at the first non-finite loss, evaluates validation data once the budget's
   samples are seen, and judges the candidate against the FP32 training *at equal
   samples* (:func:`precsearch.engine.fidelity.judge`), with the time each needs to reach
   FP32's final loss and, when the batch size or XLA differ, the precision-only gap;
6. after training, outside the timed steps, records the gradient's norm on one batch
   (global and per layer), for TensorBoard.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

from precsearch.engine.fidelity import judge, precision_gap, time_to_quality
from precsearch.engine.instrument import interleave, step, step_stats
from precsearch.engine.memory import PeakMemory
from precsearch.engine.problem import Problem
from precsearch.policy import Policy
from precsearch.policy.layers import scalar
from precsearch.records import Budget, Fidelity, Reference, TrialResult
from precsearch.stats import median

__all__ = ["run_trial"]


def run_trial(
    problem: Problem,
    policy: Policy,
    budget: Budget,
    fidelity: Fidelity,
    reference: Reference,
    fp32: tuple[Any, Any],
    memory: PeakMemory,
    same: Reference | None = None,
    context: Callable[[], Any] = contextlib.nullcontext,
    build: Callable[..., Any] | None = None,
) -> TrialResult:
    """Train and time one candidate against FP32 (see the module doc).

    Args:
        problem: The model and data.
        policy: The candidate, its batch sizes filled in (:meth:`Problem.normalise`).
        budget: Samples (as steps at the user's batch size), warm-up, blocks, watchdog.
        fidelity: What counts as training like FP32.
        reference: The user's FP32 training, one run per seed: the band.
        fp32: A traced FP32 model of the user's training and its data stream: the side
            every candidate is timed against.
        memory: The trial's peak-memory mark (set before its references ran).
        same: One FP32 run at the candidate's batch size and XLA setting, when those
            differ from the user's: the precision-only diagnostic.
        context: Wraps every candidate call (TensorFlow's graph rewrite is a setting
            that applies to the functions called while it is on).
        build: Makes the candidate's model (default :meth:`Problem.model_for`).
    """
    keras = problem.keras
    t_start = time.perf_counter()
    batch_size = policy.batch_size or problem.batch_size
    per_call = batch_size * problem.steps_per_execution
    own_per_call = problem.batch_size * problem.steps_per_execution
    end = reference.span()
    calls = budget.calls(per_call, problem.batch_size)
    result = TrialResult(policy=policy.to_dict())
    timings = result.timings
    result.memory_kind = memory.kind
    fp32_model, fp32_iter = fp32

    t0 = time.perf_counter()
    model = (build or problem.model_for)(policy, seed=0)
    iterator = problem.iterator(batch_size, seed=0)
    timings["build"] = time.perf_counter() - t0

    optimizer = model.optimizer
    lso = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    losses: list[float] = []
    scales: list[float] = []
    numerics: dict[str, Any] = {"nonfinite_step": None}
    result.numerics = numerics
    skipped = 0

    def stopped() -> bool:
        return numerics["nonfinite_step"] is not None

    def candidate_step() -> float:
        nonlocal skipped
        before = scalar(optimizer.dynamic_scale) if lso else None
        with context():
            seconds, loss = step(model, iterator)
        losses.append(loss)
        if lso:
            after = scalar(optimizer.dynamic_scale)
            scales.append(after)
            if before is not None and after < before:
                skipped += 1
        if not math.isfinite(loss) and not stopped():
            numerics["nonfinite_step"] = len(losses)
        elif len(losses) * per_call >= end and "evaluated_at" not in numerics:
            # Validation at equal samples, as the FP32 runs were: a candidate that needs
            # more calls to be timed trains on after it, untimed by this.
            result.val = problem.evaluate(model, batch_size)
            numerics["evaluated_at"] = len(losses) * per_call
        return seconds

    def finish(status: str, reason: str) -> TrialResult:
        result.status, result.reason = status, reason
        result.curve = {
            "batch_size": batch_size,
            "samples": [per_call * (i + 1) for i in range(len(losses))],
            "loss": losses,
        }
        if lso:
            numerics["loss_scale"] = scales
            numerics["min_loss_scale"] = min(scales) if scales else None
        numerics["skipped_steps"] = skipped
        numerics["skipped_share"] = skipped / max(1, len(losses))
        result.peak_memory_mb = memory.mb()
        timings["total"] = time.perf_counter() - t_start
        return result

    def nonfinite() -> TrialResult:
        return finish("infeasible", f"non-finite loss at step {numerics['nonfinite_step']}")

    t0 = time.perf_counter()
    candidate_step()
    timings["trace"] = time.perf_counter() - t0
    if stopped():
        return nonfinite()

    # Watchdog: the first call after tracing, per sample, against FP32 measured now.
    t0 = time.perf_counter()
    fp32_now = min(step(fp32_model, fp32_iter)[0] for _ in range(2))
    first = candidate_step()
    slowdown = (first / per_call) / (fp32_now / own_per_call)
    numerics["watchdog_slowdown"] = slowdown
    if slowdown > budget.watchdog:
        timings["warmup"] = time.perf_counter() - t0
        return finish(
            "too_slow",
            f"first step after tracing {slowdown:.1f}x slower than FP32 per sample "
            f"({first * 1e3:.1f} ms vs {fp32_now * 1e3:.1f} ms; watchdog {budget.watchdog:g}x)",
        )
    for _ in range(budget.warmup):
        if stopped():
            break
        candidate_step()
    timings["warmup"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    blocks = interleave(
        lambda: step(fp32_model, fp32_iter)[0],
        candidate_step,
        block=budget.block,
        sizes=(own_per_call, per_call),
        more=lambda pairs: (
            len(losses) + budget.block <= calls
            and (budget.max_blocks is None or pairs < budget.max_blocks)
        ),
        stopped=stopped,
    )
    timings["measured"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    while len(losses) < calls and not stopped():
        candidate_step()
    timings["train"] = time.perf_counter() - t0

    k = problem.steps_per_execution
    result.step_times = {"fp32": blocks.reference, "candidate": blocks.candidate}
    if blocks.reference and blocks.candidate:
        result.fp32 = step_stats(blocks.reference, problem.batch_size, k)
        result.candidate = step_stats(blocks.candidate, batch_size, k)
        result.speedup = result.candidate.samples_per_s / result.fp32.samples_per_s
    if blocks.ratios:
        result.block_ratios = {
            "median": median(blocks.ratios),
            "min": min(blocks.ratios),
            "max": max(blocks.ratios),
            "n": len(blocks.ratios),
        }
    if stopped():
        return nonfinite()

    t0 = time.perf_counter()
    if "evaluated_at" not in numerics:
        result.val = problem.evaluate(model, batch_size)
    if problem.strategy is None:  # one batch, eagerly: replicas would need a run() each
        result.gradient_norms = problem.gradient_norms(model, batch_size)
    timings["evaluate"] = time.perf_counter() - t0
    finish("ok", "")
    status, reason, gap = judge(result, reference, fidelity)
    result.status, result.reason = status, reason
    result.fidelity_gap = gap if math.isfinite(gap) else None
    result.time_to_quality = time_to_quality(result, reference)
    if same is not None:
        result.precision_gap = precision_gap(result, same, reference, fidelity)
    return result
