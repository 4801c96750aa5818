"""What a trial is given and what it measures: budget, fidelity, results, references."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from precsearch.errors import UserInputError
from precsearch.records._json import json_safe, known_fields

__all__ = [
    "Budget",
    "Fidelity",
    "Reference",
    "StepStats",
    "TrialResult",
    "downsample",
]


@dataclass(frozen=True)
class Budget:
    """How much a trial trains and measures.

    Every trial trains the same number of *examples*: ``steps`` steps of the user's own
    batch size (:meth:`samples`), so a candidate at four times the batch size takes a
    quarter of the steps. Timing counts train-function calls (one call is the user's
    ``steps_per_execution`` steps).

    Args:
        steps: Training steps at the user's own batch size: the budget in samples.
        warmup: Candidate calls after tracing that are not timed.
        block: Least calls in one timing block (blocks also last ``block_time``);
            FP32 and candidate blocks alternate, at least three pairs of them, the
            candidate training on past the budget where its blocks need the calls.
        block_time: Least seconds in one timing block, in trials, probes and the
            confirmation's rounds (``--block-time``). A block's figure is its p10 call:
            over 0.5 s blocks the quarter-second stalls of a shared CPU leave it
            (``benchmarks/results/instrument.md``); shorter blocks are faster and
            noisier, longer ones for a noisier machine.
        max_blocks: Most pairs of blocks per trial, fewer once the speedup is known to
            ±3% (the candidate trains on, untimed, after that); ``None``: no limit.
        ref_seeds: FP32 reference runs (data-order seeds) of the user's training, at
            least 3; with 12, a candidate's 3-4 runs give the quality test 80% power
            (:func:`precsearch.engine.references.candidate_runs`).
        watchdog: Stop when the first step after tracing costs more than this many
            times the FP32 step (per sample).
        stop_slow: Stop a trial once three pairs of blocks show it confidently slower
            than ``stop_below`` (a one-sided t upper bound under that bar, corrected
            for the repeated looks: :func:`precsearch.stats.confidently_slower`),
            before it trains the rest of its budget; off to learn how slow policies
            train (``--keep-slow``).
        stop_below: The speedup a trial must be able to reach not to stop (with
            ``stop_slow``): 1 (FP32), or a conservative figure of the study's best
            feasible trial once it is above 1 (corrected for the maximum over the
            feasible trials: :func:`precsearch.stored.stop_bar`), since a trial
            confidently slower than that cannot be the answer.
    """

    steps: int = 120
    warmup: int = 3
    block: int = 5
    block_time: float = 0.5
    max_blocks: int | None = 8
    ref_seeds: int = 12
    watchdog: float = 5.0
    stop_slow: bool = True
    stop_below: float = 1.0

    def __post_init__(self) -> None:
        for name in ("steps", "block", "ref_seeds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserInputError(f"budget {name} is {value!r}, expected a positive integer")
        if self.ref_seeds < 3:
            raise UserInputError(
                f"--fp32-runs {self.ref_seeds}: expected at least 3 (budget ref_seeds)"
            )
        if self.steps < self.warmup + 2 + self.block:
            raise UserInputError(
                f"budget steps is {self.steps}, expected at least warmup + 2 + block = "
                f"{self.warmup + 2 + self.block} so that one block is timed"
            )
        if not self.block_time > 0:
            raise UserInputError(
                f"--block-time {self.block_time!r}: expected a positive number of seconds"
            )
        if not self.stop_below >= 1:
            raise UserInputError(f"budget stop_below is {self.stop_below!r}, expected >= 1")
        if not self.watchdog > 1:
            raise UserInputError(f"budget watchdog is {self.watchdog!r}, expected > 1")

    def samples(self, batch_size: int) -> int:
        """The examples every trial trains on, given the user's own batch size."""
        return self.steps * batch_size

    def calls(self, samples_per_call: int, batch_size: int, timed: bool = True) -> int:
        """Train-function calls that cover the budget at ``samples_per_call`` (at least
        enough to time one block, when ``timed``)."""
        calls = -(-self.samples(batch_size) // samples_per_call)
        return max(calls, self.warmup + 2 + self.block) if timed else calls

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Budget:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class Fidelity:
    """How closely a candidate must follow FP32 (see :mod:`precsearch.engine.fidelity`).

    Args:
        tolerance: Largest feasible gap, in multiples of the test's bar (1: the one-sided
            test of the candidate's mean against FP32's at level ``alpha``; above 1 it
            calls fewer candidates worse, and catches fewer that are).
        alpha: How often an FP32 run, judged as a candidate, may be called worse (the
            test's one-sided level, over all figures together).
        floor: The unit of a loss is at least this share of how much FP32's loss fell
            over the budget (the learning signal), so that seeds which happen to agree
            do not make everything infeasible.
        metric_floor: The unit of a validation metric in [0, 1] is at least this (half
            an accuracy point).
        max_skipped: Largest share of steps skipped for overflow (dynamic loss scale).
    """

    tolerance: float = 1.0
    alpha: float = 0.05
    floor: float = 0.02
    metric_floor: float = 0.005
    max_skipped: float = 0.2

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fidelity:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        return cls(**known_fields(cls, data))


@dataclass
class StepStats:
    """Per-step times of one configuration, in seconds.

    Each time is one train-function call of ``steps_per_call`` steps (the user's
    ``steps_per_execution``). ``p10`` is the cost estimate (stalls only add time);
    ``samples_per_s`` is the examples of one call over ``p10``.
    """

    p10: float
    median: float
    min: float
    max: float
    n: int
    batch_size: int
    samples_per_s: float
    steps_per_call: int = 1


def _pick(values: list[Any], max_points: int) -> list[Any]:
    if len(values) <= max_points:
        return list(values)
    step = (len(values) - 1) / (max_points - 1)
    return [values[round(i * step)] for i in range(max_points)]


def _nan_for_none(losses: list[float | None]) -> list[float]:
    # JSON writes a non-finite loss as null: read it back as the NaN it was, so that a
    # stored curve sums and compares like the one measured.
    return [math.nan if loss is None else loss for loss in losses]


def downsample(curve: dict[str, Any], max_points: int) -> dict[str, Any]:
    """A curve with at most ``max_points`` points, first and last kept.

    Points are picked evenly (not averaged) so that a NaN or a spike stays visible.
    """
    out = dict(curve)
    for key in ("samples", "loss"):
        if key in curve:
            out[key] = _pick(list(curve[key]), max_points)
    return out


@dataclass
class TrialResult:
    """Everything one trial measured; serialises to JSON (never pickle).

    Attributes:
        policy: The policy's JSON form.
        status: ``ok`` (feasible), ``infeasible``, ``too_slow`` or ``failed``.
        reason: Why, for any status but ``ok``.
        speedup: Candidate samples/s over FP32 samples/s: the geometric mean of the
            ratios of pairs of adjacent blocks (each block's 10th-percentile call).
        block_ratios: Its figures (:func:`precsearch.stats.log_figures`): ``estimate``,
            the Student-t interval ``low``-``high``, ``median``, ``min``, ``max``,
            ``rounds`` (block pairs).
        fp32: FP32 step statistics (at the model's own batch size).
        candidate: The candidate's step statistics (at the policy's batch size).
        fidelity_gap: How much worse than the user's FP32 training it trains at equal
            samples, in noise units (negative: better; see
            :mod:`precsearch.engine.fidelity`); per figure in ``numerics["gaps"]``.
        precision_gap: Its training loss against FP32's at the candidate's own batch
            size and XLA setting (one run, the same data order), in the same units:
            what precision alone changes. ``None`` when those are the user's.
        twin: That FP32 run judged against the user's FP32 training like a candidate:
            ``{status, reason, fidelity_gap}`` (empty when there is none).
        time_to_quality: ``{target_loss, fp32_samples, samples, speedup, outcome,
            trace_s}``: the samples each needs to reach the loss every FP32 run reached,
            the wall-time ratio (FP32's over the candidate's), and ``outcome``
            (``reached``, ``not reached within 1.5x the budget`` or ``not measured``);
            ``trace_s`` is the candidate's one-off tracing.
        curve: ``{"batch_size", "samples", "loss"}``: loss per call by samples seen.
        val: ``{"loss", "metric", "metric_name"}`` when there is validation data.
        peak_memory_mb: Peak process RSS during the trial (CPU) or device memory (GPU).
        memory_kind: ``"rss"`` or ``"gpu"`` (``"rss (process lifetime)"`` where the
            kernel's peak mark cannot be reset).
        numerics: ``nonfinite_step``, ``loss_scale`` (per step, dynamic scaling),
            ``min_loss_scale``, ``skipped_steps``, ``skipped_share``.
        timings: Wall seconds by phase: reference, build, trace, warmup, measured,
            train, evaluate, total.
        step_times: ``{"fp32": [...], "candidate": [...]}``: every timed call of each
            side, in seconds, in the order of the interleaved blocks.
        gradient_norms: The gradient's norm on one batch after training (``global``
            and per layer id; unscaled under loss scaling), measured outside the timed
            steps.
    """

    policy: dict[str, Any]
    status: str = "failed"
    reason: str = ""
    speedup: float | None = None
    block_ratios: dict[str, float] = field(default_factory=dict)
    fp32: StepStats | None = None
    candidate: StepStats | None = None
    fidelity_gap: float | None = None
    precision_gap: float | None = None
    twin: dict[str, Any] = field(default_factory=dict)
    time_to_quality: dict[str, Any] = field(default_factory=dict)
    curve: dict[str, Any] = field(default_factory=lambda: {"samples": [], "loss": []})
    val: dict[str, Any] = field(default_factory=dict)
    peak_memory_mb: float | None = None
    memory_kind: str = "rss"
    numerics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    step_times: dict[str, list[float]] = field(default_factory=dict)
    gradient_norms: dict[str, float] = field(default_factory=dict)

    @classmethod
    def failed(cls, policy: Any, reason: str, detail: str = "") -> TrialResult:
        """A ``failed`` result carrying the reason (and ``detail`` for people).

        Args:
            policy: The policy the trial ran (a :class:`~precsearch.policy.Policy`).
            reason: A short cause such as ``"timeout"`` or ``"out of memory"``.
            detail: Free text (the last lines of a traceback, a signal name).
        """
        result = cls(policy=policy.to_dict(), status="failed", reason=reason)
        if detail:
            result.numerics["detail"] = detail
        return result

    @property
    def feasible(self) -> bool:
        """Whether the trial trained like FP32 (status ``ok``)."""
        return self.status == "ok"

    def to_dict(self, max_points: int | None = None) -> dict[str, Any]:
        """The JSON form; ``max_points`` down-samples the loss curve, loss scale and
        step times."""
        data = asdict(self)
        if max_points is not None:
            data["curve"] = downsample(data["curve"], max_points)
            scale = data["numerics"].get("loss_scale")
            if scale:
                data["numerics"]["loss_scale"] = _pick(scale, max_points)
            for side, times in data["step_times"].items():
                data["step_times"][side] = _pick(times, max_points)
        return json_safe(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        data = known_fields(cls, data)
        for key in ("fp32", "candidate"):
            if data.get(key) is not None:
                data[key] = StepStats(**known_fields(StepStats, data[key]))
        if data.get("curve") and data["curve"].get("loss"):
            data["curve"] = {**data["curve"], "loss": _nan_for_none(data["curve"]["loss"])}
        return cls(**data)

    def to_json(self, max_points: int | None = None) -> str:
        """JSON text (``NaN``/``inf`` become ``null``)."""
        return json.dumps(self.to_dict(max_points), allow_nan=False)


@dataclass
class Reference:
    """FP32 runs at one batch size, LR rule and XLA setting, one per data-order seed.

    Attributes:
        batch_size, lr_rule, jit_compile, steps: What was trained (``steps``: calls).
        samples_per_call: Examples per point of a curve (batch size x steps per call).
        curves: Loss per call, one list per seed (data order ``seeds[i]``).
        val_loss, val_metric: Final validation figures per seed (``None`` without
            validation data).
        metric_name: Name of the first compiled metric, if any.
        seconds: Wall time of all runs.
        seeds: The data-order seeds of the runs: 1..n for the noise of the user's
            training (candidates train with seed 0, held out); 0 for a candidate's FP32
            twin.
        initial: ``{loss, metric}`` on the validation data at the initial weights:
            what a figure that does not move stays at.
    """

    batch_size: int
    lr_rule: str
    steps: int
    curves: list[list[float]]
    val_loss: list[float | None]
    val_metric: list[float | None]
    metric_name: str | None = None
    seconds: float = 0.0
    jit_compile: bool = False
    samples_per_call: int = 0
    seeds: list[int] = field(default_factory=list)
    initial: dict[str, Any] = field(default_factory=dict)

    def samples(self) -> list[int]:
        """Samples seen at each point of the longest curve."""
        per = self.samples_per_call or self.batch_size
        return [per * (i + 1) for i in range(max(map(len, self.curves), default=0))]

    def span(self) -> int:
        """The samples the runs were given: the budget every candidate is judged at."""
        return (self.samples_per_call or self.batch_size) * self.steps

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"record": "precsearch.reference/2", **json_safe(asdict(self))}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reference:
        """Inverse of :meth:`to_dict` (unknown keys are ignored; a curve's ``null``, a
        non-finite loss, is read as NaN)."""
        data = known_fields(cls, data)
        if "curves" in data:
            data["curves"] = [_nan_for_none(curve) for curve in data["curves"]]
        return cls(**data)
