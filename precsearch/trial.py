"""One trial: train a candidate policy, time it against FP32, judge it against FP32.

:func:`run_trial`

1. builds the candidate from the problem's initial weights, applies the policy,
   recompiles;
2. traces it (first step), and stops at once if the first step after tracing costs more
   than ``budget.watchdog`` times the FP32 step per sample (``too_slow``);
3. trains it the full budget from the same data order as the FP32 reference, its first
   blocks of ``budget.block`` steps alternating with blocks of the already traced FP32
   model (:func:`precsearch.instrument.interleave`), every step timed;
4. estimates each side's cost as the p10 of its step times, with the median, min, max
   and count beside it, and the per-block ratios as the spread;
5. records the loss per step, the dynamic loss scale and skipped steps, stops at the
   first non-finite loss, evaluates validation data, and judges fidelity against the
   FP32 reference (:func:`precsearch.objectives.judge`).
"""

from __future__ import annotations

import math
import time
from typing import Any

from precsearch.instrument import interleave, median, step, step_stats
from precsearch.memory import PeakMemory
from precsearch.objectives import judge
from precsearch.policy import Policy
from precsearch.problem import Problem
from precsearch.records import Budget, Fidelity, Reference, TrialResult

__all__ = ["run_trial"]


def run_trial(
    problem: Problem,
    policy: Policy,
    budget: Budget,
    fidelity: Fidelity,
    reference: Reference,
    fp32: tuple[Any, Any],
    memory: PeakMemory,
) -> TrialResult:
    """Train and time one candidate against FP32 (see the module doc).

    Args:
        problem: The model and data.
        policy: The candidate, its batch sizes filled in (:meth:`Problem.normalise`).
        budget: Steps, warm-up, blocks and watchdog.
        fidelity: What counts as training like FP32.
        reference: The FP32 runs at the candidate's batch size and LR rule.
        fp32: A traced FP32 model at the model's own batch size and its data stream:
            the side every candidate is timed against.
        memory: The trial's peak-memory mark (set before its references ran).
    """
    keras = problem.keras
    t_start = time.perf_counter()
    batch_size = policy.batch_size or problem.batch_size
    result = TrialResult(policy=policy.to_dict())
    timings = result.timings
    result.memory_kind = memory.kind
    fp32_model, fp32_iter = fp32

    t0 = time.perf_counter()
    model = problem.model_for(policy, seed=0)
    iterator = iter(problem.dataset(batch_size, seed=0))
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
        before = float(optimizer.dynamic_scale) if lso else None
        seconds, loss = step(model, iterator)
        losses.append(loss)
        if lso:
            after = float(optimizer.dynamic_scale)
            scales.append(after)
            if before is not None and after < before:
                skipped += 1
        if not math.isfinite(loss) and not stopped():
            numerics["nonfinite_step"] = len(losses)
        return seconds

    def finish(status: str, reason: str) -> TrialResult:
        result.status, result.reason = status, reason
        result.curve = {
            "batch_size": batch_size,
            "samples": [batch_size * (i + 1) for i in range(len(losses))],
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

    # Watchdog: the first step after tracing, per sample, against FP32 measured now.
    t0 = time.perf_counter()
    fp32_now = min(step(fp32_model, fp32_iter)[0] for _ in range(2))
    first = candidate_step()
    slowdown = (first / batch_size) / (fp32_now / problem.batch_size)
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
        sizes=(problem.batch_size, batch_size),
        more=lambda pairs: (
            len(losses) + budget.block <= budget.steps
            and (budget.max_blocks is None or pairs < budget.max_blocks)
        ),
        stopped=stopped,
    )
    timings["measured"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    while len(losses) < budget.steps and not stopped():
        candidate_step()
    timings["train"] = time.perf_counter() - t0

    if blocks.reference and blocks.candidate:
        result.fp32 = step_stats(blocks.reference, problem.batch_size)
        result.candidate = step_stats(blocks.candidate, batch_size)
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
    result.val = problem.evaluate(model, batch_size)
    timings["evaluate"] = time.perf_counter() - t0
    finish("ok", "")
    status, reason, gap = judge(result, reference, fidelity)
    result.status, result.reason = status, reason
    result.fidelity_gap = gap if math.isfinite(gap) else None
    return result
