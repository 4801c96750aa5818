"""What a study decides: the confirmation's measurement and record, and the winner."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from precsearch.records._json import json_safe, known_fields

__all__ = ["Confirmation", "Measurement", "Winner"]


@dataclass
class Measurement:
    """Samples/s of each configuration in each confirmation round (from the worker).

    Attributes:
        rates: Label (``fp32``, ``null``, ``global``, ``c0``, ``c1``...) to samples/s,
            one figure per round: the batch size over the median step of its block.
        steps: Label to the steps in each of its timed blocks.
    """

    rates: dict[str, list[float]]
    steps: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """Inverse of :meth:`to_dict`."""
        return cls(**known_fields(cls, data))


@dataclass
class Confirmation:
    """The confirmation's record: what was re-measured and what was chosen.

    Stored as the study's ``confirmation`` user attr. Every speedup is a spread
    ``{median, min, max, rounds}`` over rounds, a ratio within each round.

    Attributes:
        rounds, block: How it was measured (block: least steps per timed block).
        candidates: ``{trial, samples_per_s, speedup_vs_fp32, speedup_vs_global_mixed}``
            per re-measured trial.
        fp32_trial, global_trial: The baseline trials' numbers.
        global_vs_fp32: The global recipe against FP32 (``None`` without one, or when it
            did not train like FP32).
        global_reason: Why the global recipe was not measured, e.g. ``"infeasible
            (non-finite loss at step 4)"``.
        null_vs_fp32: A second FP32 copy against FP32: the instrument's own error.
        bar: The median a candidate had to beat (1 or the copy's max, whichever is more).
        fp32_samples_per_s: FP32's median samples/s over the rounds.
        best_trial: The chosen trial (the FP32 baseline trial when nothing beat FP32).
        best_is_fp32: Whether the answer is FP32.
        best: The chosen policy's ``speedup_vs_fp32`` and ``speedup_vs_global_mixed``.
        verdict: The answer in one sentence.
    """

    rounds: int
    block: int
    candidates: list[dict[str, Any]]
    fp32_trial: int
    null_vs_fp32: dict[str, float]
    bar: float
    fp32_samples_per_s: float
    best_trial: int
    best_is_fp32: bool
    best: dict[str, Any]
    verdict: str
    global_trial: int | None = None
    global_vs_fp32: dict[str, float] | None = None
    global_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"record": "precsearch.confirmation/1", **json_safe(asdict(self))}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Confirmation | None:
        """Inverse of :meth:`to_dict`; ``None`` for a study not confirmed yet."""
        if not data:
            return None
        return cls(**known_fields(cls, data))


@dataclass
class Winner:
    """What an exporter gets: the confirmed best policy and where it came from.

    Attributes:
        policy: The best :class:`precsearch.Policy`, manifest filled in.
        study: The Optuna study (``None`` for exporters that run in the worker).
        model: The Keras model trained under the policy for the trial budget (only for
            exporters with ``needs_model``, which run in the worker).
    """

    policy: Any
    study: Any = None
    model: Any = None
