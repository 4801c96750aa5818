"""The timing instrument: per-step timing, interleaved blocks, and their statistics.

Rules it keeps (the README's "What a trial measures"):

* Time the training steps themselves (one train-function call each), never whole
  ``fit()`` calls, which here sometimes spent seconds outside their steps.
* Compare two configurations only within one process, in blocks that alternate; a
  block, not a single step, because a step can be a few milliseconds.
* Stalls only ever add time, so a cost estimate is a low quantile (p10) of the step
  times, reported with the median, min, max and count; a block's figure is its p10 too
  (:func:`block_rate`). On the 2-core machines here a shared CPU runs whole stretches of
  a quarter second slower: over blocks of at least :data:`MIN_BLOCK_S` (0.5 s) the p10
  finds the uncontended calls. FP32 against an identical copy (wide_mlp) varied 0.058 per
  round that way (sd of the log ratio; variance per second of rounds 0.0070), against
  0.104 (0.0137) for the median of 0.25 s blocks, and no copy or place in the round read
  apart beyond that noise (``benchmarks/results/instrument.md``).

Nothing here imports a framework: it calls the model's own train function through the
backend (:mod:`precsearch.backend`), which waits for the device before a call's
time is read.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from precsearch.backend import Backend, current
from precsearch.records import Budget, StepStats

__all__ = [
    "MIN_BLOCK_S",
    "Interleaved",
    "Timed",
    "block_rate",
    "block_steps",
    "interleave",
    "prepare",
    "step",
    "step_stats",
    "timed_rounds",
]

MIN_BLOCK_S = Budget.block_time  # shortest timed block by default (``--block-time``)


def block_rate(times: list[float], samples_per_call: int) -> float:
    """A block's samples/s: the samples of one call over the p10 of its call times."""
    import numpy as np

    return samples_per_call / float(np.percentile(np.asarray(times, dtype=float), 10))


def step(
    model: Any,
    iterator: Any,
    clock: Callable[[], float] = time.perf_counter,
    backend: Backend | None = None,
) -> tuple[float, float]:
    """One call of the model's train function: (seconds, loss of this call).

    Metrics are reset before the timer starts so that ``loss`` is this call's, not a
    running mean; its read-back is timed. The timer stops only after the device has finished
    (:meth:`Backend.sync <precsearch.backend.Backend.sync>`): on a GPU the call
    returns while its work is still queued. ``clock`` reads the time in seconds;
    ``backend`` is Keras's own unless given.
    """
    backend = backend or current()
    model.reset_metrics()
    t0 = clock()
    logs = backend.train_call(model, iterator)
    loss = float(logs["loss"])  # reading it back waits for the step's loss...
    backend.sync()  # ...and this for everything else the step queued (a GPU's updates)
    return clock() - t0, loss


def step_stats(times: list[float], batch_size: int, steps_per_call: int = 1) -> StepStats:
    """Statistics of a list of call times; the p10 is the cost estimate."""
    import numpy as np

    arr = np.asarray(times, dtype=float)
    p10 = float(np.percentile(arr, 10))
    return StepStats(
        p10=p10,
        median=float(np.median(arr)),
        min=float(arr.min()),
        max=float(arr.max()),
        n=len(times),
        batch_size=batch_size,
        samples_per_s=batch_size * steps_per_call / p10,
        steps_per_call=steps_per_call,
    )


@dataclass
class Interleaved:
    """Step times of the reference and the candidate from alternating blocks.

    Attributes:
        reference, candidate: Every timed step of each side, in seconds.
        ratios: Candidate samples/s over reference samples/s per pair of blocks (each
            side's :func:`block_rate`), the spread of the estimate.
    """

    reference: list[float] = field(default_factory=list)
    candidate: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)


def interleave(
    reference_step: Callable[[], float],
    candidate_step: Callable[[], float],
    *,
    block: int,
    sizes: tuple[int, int],
    more: Callable[[int, list[float]], bool],
    stopped: Callable[[], bool],
) -> Interleaved:
    """Alternate timed blocks of the reference and the candidate (ABBA order).

    Args:
        reference_step, candidate_step: Run one step; return its seconds.
        block: Steps per block.
        sizes: The (reference, candidate) batch sizes, for samples/s.
        more: Given the number of block pairs so far and their ratios, whether to time
            another pair.
        stopped: Whether the candidate has stopped (a non-finite loss); checked after
            every candidate step.
    """
    out = Interleaved()
    pairs = 0
    while more(pairs, out.ratios) and not stopped():
        # ABBA order so that a drift in machine speed falls on both sides alike.
        reference_first = pairs % 2 == 0
        ref_block: list[float] = []
        cand_block: list[float] = []
        for side in (0, 1):
            if (side == 0) == reference_first:
                ref_block = [reference_step() for _ in range(block)]
            else:
                for _ in range(block):
                    cand_block.append(candidate_step())
                    if stopped():
                        break
        pairs += 1
        out.reference += ref_block
        out.candidate += cand_block
        if cand_block and not stopped():
            out.ratios.append(block_rate(cand_block, sizes[1]) / block_rate(ref_block, sizes[0]))
    return out


@dataclass
class Timed:
    """One configuration in :func:`timed_rounds`: a traced model and its data stream.

    ``context`` (a context-manager factory) wraps its steps: TensorFlow's graph rewrite
    applies to the functions called while its option is on. ``steps`` is set by
    :func:`prepare`.
    """

    label: str
    model: Any
    iterator: Any
    samples_per_call: int
    steps: int = 0
    context: Callable[[], Any] = contextlib.nullcontext


def block_steps(seconds: float, block: int, least_s: float = MIN_BLOCK_S) -> int:
    """Calls in a timed block: at least ``block``, and at least ``least_s`` seconds
    (``--block-time``) of calls that take ``seconds`` each (a few millisecond calls are
    too short a window on a shared machine: FP32 against itself swung 0.8-1.25x that
    way)."""
    return max(block, math.ceil(least_s / max(seconds, 1e-6)))


def prepare(
    config: Timed,
    block: int,
    warmup: int,
    clock: Callable[[], float] = time.perf_counter,
    least_s: float = MIN_BLOCK_S,
) -> Timed:
    """Warm a configuration up and size its blocks (:func:`block_steps`, at least
    ``least_s`` seconds) from the least of three probe calls: a stall in the probe would
    shorten every block."""
    with config.context():
        for _ in range(warmup):
            step(config.model, config.iterator, clock)
        seconds = min(step(config.model, config.iterator, clock)[0] for _ in range(3))
    config.steps = block_steps(seconds, block, least_s)
    return config


def timed_rounds(
    configs: list[Timed],
    orders: list[list[str]],
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Samples/s of each configuration in each round, the configurations interleaved.

    Each round runs every configuration (each :func:`prepare`-d) once, in the round's
    order from ``orders`` (a list of labels per round: random orders, so that none
    always follows the same one; what ran before leaves caches and data threads
    behind), after one untimed call that lets that settle. A round's figure is the
    samples of one call over the block's p10 call (:func:`block_rate`).
    """
    by_label = {config.label: config for config in configs}
    rates: dict[str, list[float]] = {config.label: [] for config in configs}
    for order in orders:
        for label in order:
            config = by_label[label]
            with config.context():
                step(config.model, config.iterator, clock)
                times = [step(config.model, config.iterator, clock)[0] for _ in range(config.steps)]
            rates[label].append(block_rate(times, config.samples_per_call))
    return rates
