"""What a study decides: the confirmation's measurement and record, and the winner."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from precsearch.records._json import json_safe, known_fields

__all__ = ["GRAPH_REWRITE", "PARTS", "PEERS", "Confirmation", "Measurement", "Winner"]

# The label of TensorFlow's own graph rewrite, the peer measured beside every answer.
GRAPH_REWRITE = "graph_rewrite"

# What an answer can change from the user's training, each of which must earn its place
# (:mod:`precsearch.study.verdict`), and their names for people.
PARTS = {"precision": "low precision", "batch": "batch size", "xla": "XLA"}
# The peers an answer is shown against, by their name in a confirmation's record, and the
# baseline label prefix of the trial each one is (the graph rewrite is a trial of its own).
PEERS = {
    "global": ("global mixed recipe", "global_"),
    "global_except_pinned": ("global mixed recipe except the pinned groups", "except_pinned_"),
    GRAPH_REWRITE: ("TensorFlow's graph rewrite", None),
}


@dataclass
class Measurement:
    """Samples/s of each configuration in each confirmation round (from the worker).

    Attributes:
        rates: Label (``fp32``, ``null``, ``c0``...) to samples/s, one figure per
            round: the examples of one call over its block's 10th-percentile call.
        steps: Label to the calls in each of its timed blocks.
        orders: The order the labels ran in, per round.
    """

    rates: dict[str, list[float]]
    steps: dict[str, int] = field(default_factory=dict)
    orders: list[list[str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """Inverse of :meth:`to_dict`."""
        return cls(**known_fields(cls, data))


@dataclass
class Confirmation:
    """The confirmation's record: what was re-measured, what was chosen, and how fast
    the answer is, from rounds measured after the choice
    (:mod:`precsearch.study.confirm`).

    Stored as the study's ``confirmation`` user attr. Every ratio is the figures of
    :func:`precsearch.stats.ratio_figures`: ``{estimate, low, high, confidence, median,
    min, max, rounds}`` of per-round paired samples/s ratios.

    Attributes:
        rounds: ``{"selection": n, "fresh": m}``: rounds measured in each phase.
        block: Least calls per timed block.
        seed: The seed of the round orders.
        candidates: Per candidate of the selection: ``trial``, ``label``,
            ``speedup_vs_fp32``, ``lower`` and ``upper`` (one-sided bounds, corrected for
            the number of candidates), ``wins``.
        fp32_trial: The FP32 baseline trial's number.
        bar: The A/A error (a ratio ≥ 1) a candidate's lower bound had to clear.
        best_trial: The answer's trial (the FP32 baseline trial when FP32 is the answer;
            the winner's, when a simpler policy replaced it without a trial of its own).
        best_is_fp32: Whether the answer is the user's own FP32 training.
        best_policy: The answer's policy (JSON form).
        best: The answer in fresh rounds: ``answer`` (``fp32``, ``winner`` or
            ``simpler``: the winner with the parts left out that did not earn their
            place, its ``policy``, the winner's figures in ``replaced`` and how its
            quality was judged in ``quality``), ``speedup_vs_fp32`` (``None`` for FP32:
            the answer is the user's own training, and the copy's figures are
            ``null_vs_fp32``), ``speedup_vs_global_mixed``, ``parts`` (by :data:`PARTS`:
            what each part kept adds, the others kept), ``left_out`` (the same for each
            part left out), ``repeated`` (whether the winner repeated),
            ``instrument_error``, ``batch_size`` and ``jit_compile``.
        null_vs_fp32: The FP32 copy against FP32 in the fresh rounds.
        peers: Per peer (``global``: one global mixed policy with a float32 output;
            ``graph_rewrite``: TensorFlow's own): ``{vs_fp32, status, reason, trial}``;
            a peer that did not train like FP32 has ``status`` "infeasible" and no
            ratio.
        fp32_samples_per_s: FP32's samples/s in the fresh rounds (geometric mean).
        verdict: The answer in one sentence.
        confidence: The level of the intervals shown.
        measured: The raw rounds, ``{"selection": Measurement, "fresh": Measurement}``
            as JSON: every figure can be recomputed from them.
        seconds: Wall seconds of each phase: ``selection`` (its rounds, tracing
            included), ``peers`` (the graph rewrite's trial), ``fresh`` (the fresh
            rounds) and, once the answer is written, ``export``.
    """

    rounds: dict[str, int]
    block: int
    seed: int
    candidates: list[dict[str, Any]]
    fp32_trial: int
    bar: float
    best_trial: int
    best_is_fp32: bool
    best_policy: dict[str, Any]
    best: dict[str, Any]
    null_vs_fp32: dict[str, float]
    peers: dict[str, dict[str, Any]]
    fp32_samples_per_s: float
    verdict: str
    confidence: float = 0.95
    measured: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"record": "precsearch.confirmation/3", **json_safe(asdict(self))}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Confirmation | None:
        """Inverse of :meth:`to_dict`; ``None`` for a study not confirmed yet (or
        confirmed by a precsearch before this record's version: confirm it again)."""
        if not data or data.get("record") != "precsearch.confirmation/3":
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
