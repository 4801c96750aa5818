"""What a trial is given and what it measures: budget, fidelity, results, references."""

from __future__ import annotations

import json
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
        block: Calls in one timing block; FP32 and candidate blocks alternate. A
            candidate trains at least ``warmup + 2 + block`` calls, so that one block
            is timed whatever its batch size.
        max_blocks: Most FP32 blocks interleaved per trial (the candidate trains on,
            untimed, after that); ``None`` interleaves for the whole budget.
        ref_seeds: FP32 reference runs (data-order seeds) per batch size, at least 3.
        watchdog: Stop when the first step after tracing costs more than this many
            times the FP32 step (per sample).
    """

    steps: int = 120
    warmup: int = 3
    block: int = 5
    max_blocks: int | None = 12
    ref_seeds: int = 3
    watchdog: float = 5.0

    def __post_init__(self) -> None:
        for name in ("steps", "block", "ref_seeds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserInputError(f"budget {name} is {value!r}, expected a positive integer")
        if self.ref_seeds < 3:
            raise UserInputError(f"budget ref_seeds is {self.ref_seeds}, expected at least 3")
        if self.steps < self.warmup + 2 + self.block:
            raise UserInputError(
                f"budget steps is {self.steps}, expected at least warmup + 2 + block = "
                f"{self.warmup + 2 + self.block} so that one block is timed"
            )
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


@dataclass(frozen=True)
class Fidelity:
    """How closely a candidate must follow FP32 (see :mod:`precsearch.engine.fidelity`).

    Args:
        tolerance: Largest feasible gap, in units of the FP32 band.
        rel_floor: The band is at least this share of the FP32 value, so that a tiny
            band between seeds does not make everything infeasible.
        metric_abs: If set, the validation metric must be within this of FP32's mean.
        metric_rel: If set, ... within this share of FP32's mean.
        max_skipped: Largest share of steps skipped for overflow (dynamic loss scale).
    """

    tolerance: float = 1.0
    rel_floor: float = 0.02
    metric_abs: float | None = None
    metric_rel: float | None = None
    max_skipped: float = 0.2

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return asdict(self)


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
        speedup: Candidate samples/s over FP32 samples/s (p10 step times).
        block_ratios: The same ratio per pair of adjacent blocks (median of steps):
            ``{median, min, max, n}``, the spread of the estimate.
        fp32: FP32 step statistics (at the model's own batch size).
        candidate: The candidate's step statistics (at the policy's batch size).
        fidelity_gap: Distance from the user's FP32 training at equal samples, in units
            of its band (see :mod:`precsearch.engine.fidelity`).
        precision_gap: The same distance from FP32 at the candidate's own batch size and
            XLA setting (one run): what precision alone changes. ``None`` when those
            are the user's (then it is the fidelity gap).
        time_to_quality: ``{target_loss, fp32_samples, samples, speedup}``: the samples
            each needs to reach the FP32 training's final smoothed loss and the wall
            time ratio (FP32's over the candidate's); ``speedup`` is ``None`` when the
            candidate did not get there.
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
        curves: Loss per call, one list per seed (seed i uses data order i).
        val_loss, val_metric: Final validation figures per seed (``None`` without
            validation data).
        metric_name: Name of the first compiled metric, if any.
        seconds: Wall time of all runs.
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

    def samples(self) -> list[int]:
        """Samples seen at each point of the longest curve."""
        per = self.samples_per_call or self.batch_size
        return [per * (i + 1) for i in range(max(map(len, self.curves), default=0))]

    def span(self) -> int:
        """The samples the runs were given: the budget every candidate is judged at."""
        return (self.samples_per_call or self.batch_size) * self.steps

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"record": "precsearch.reference/1", **json_safe(asdict(self))}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reference:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        return cls(**known_fields(cls, data))
