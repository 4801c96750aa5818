"""Writing a study's results into its folder for people and for other programs."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from precsearch._version import __version__
from precsearch.errors import UserInputError
from precsearch.files import write_text_atomic
from precsearch.hardware import describe
from precsearch.policy import Policy
from precsearch.records import TrialResult
from precsearch.results.explain import (
    answer_params,
    group_effects,
    pin_summary,
    probe_summary,
    why_lines,
)
from precsearch.stored import (
    baseline_of,
    confirmation_of,
    fp32_result,
    is_feasible,
    reason_of,
    repeat_of,
    result_of,
    status_of,
    stored_policy,
    study_record,
)

__all__ = [
    "best_policy_with_manifest",
    "trials_frame",
    "write_trials_csv",
]


def trials_frame(study: Any) -> Any:
    """Every trial of a study as a pandas DataFrame, one row each.

    Columns: ``number``, ``state``, ``status``, ``reason``, ``baseline``, ``speedup``
    with its block spread, ``fidelity_gap``, ``feasible``, samples/s of FP32 and the
    candidate, memory, duration, and each parameter as ``param:<name>``.
    """
    import pandas as pd

    record = confirmation_of(study)
    confirmed = {entry["trial"]: entry for entry in record.candidates} if record else {}
    best = record.best_trial if record else None
    rows = []
    for trial in study.get_trials(deepcopy=False):
        result = result_of(trial) or TrialResult(policy={})
        blocks = result.block_ratios
        fp32 = asdict(result.fp32) if result.fp32 else {}
        cand = asdict(result.candidate) if result.candidate else {}
        row: dict[str, Any] = {
            "number": trial.number,
            "state": trial.state.name,
            "status": status_of(trial),
            "reason": reason_of(trial),
            "baseline": baseline_of(trial),
            "duplicate_of": repeat_of(trial),
            "speedup": result.speedup,
            "speedup_low": blocks.get("low"),
            "speedup_high": blocks.get("high"),
            "speedup_blocks_min": blocks.get("min"),
            "speedup_blocks_max": blocks.get("max"),
            "block_pairs": blocks.get("rounds"),
            "fidelity_gap": result.fidelity_gap,
            "feasible": is_feasible(trial),
            "objective_speedup": trial.values[0] if trial.values else None,
            "objective_gap": trial.values[1] if trial.values else None,
            "fp32_samples_per_s": fp32.get("samples_per_s"),
            "candidate_samples_per_s": cand.get("samples_per_s"),
            "candidate_step_p10_ms": cand["p10"] * 1e3 if cand else None,
            "candidate_step_median_ms": cand["median"] * 1e3 if cand else None,
            "timed_steps": cand.get("n"),
            "peak_memory_mb": result.peak_memory_mb,
            "duration_s": trial.duration.total_seconds() if trial.duration else None,
        }
        row["time_to_quality_speedup"] = result.time_to_quality.get("speedup")
        row["time_to_quality_outcome"] = result.time_to_quality.get("outcome")
        row["precision_gap"] = result.precision_gap
        # The selection rounds' figures of the candidates (the answer's own, from fresh
        # rounds, are in the confirmation record and the policy's manifest).
        figures = (confirmed.get(trial.number) or {}).get("speedup_vs_fp32") or {}
        for stat in ("estimate", "low", "high", "rounds"):
            row[f"confirmed_speedup_vs_fp32_{stat}"] = figures.get(stat)
        row["best"] = trial.number == best
        for name, value in trial.params.items():
            row[f"param:{name}"] = value
        rows.append(row)
    return pd.DataFrame(rows)


def write_trials_csv(study: Any, path: str | os.PathLike[str]) -> Path:
    """Write :func:`trials_frame` as CSV (atomically) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(path, trials_frame(study).to_csv(index=False))


def best_policy_with_manifest(study: Any) -> Policy:
    """The confirmed best policy, its manifest filled from the study's storage.

    Raises:
        UserInputError: The study has no confirmation yet.
    """
    record = confirmation_of(study)
    if record is None:
        raise UserInputError(
            f"study {study.study_name!r} has no confirmed best policy yet: run "
            "`precsearch run` on it to the end"
        )
    trial = study.trials[record.best_trial]
    policy = Policy.from_dict(record.best_policy)
    info = study_record(study, "model_info")
    chosen = record.best
    result = result_of(trial)
    fp32 = fp32_result(study)
    # A simpler answer than the winner (a part left out) without a trial of its own: its
    # quality is what the confirmation found for it (chosen["quality"]).
    borrowed = stored_policy(trial) != policy
    quality = chosen.get("quality", {})
    policy.manifest = {
        "confirmed": {
            "speedup_vs_fp32": chosen.get("speedup_vs_fp32"),
            "speedup_vs_global_mixed": chosen.get("speedup_vs_global_mixed"),
            "time_to_quality": chosen.get("time_to_quality"),
            # What each part kept adds (the others kept), and each part left out.
            "parts": chosen.get("parts", {}),
            "left_out": chosen.get("left_out", {}),
            "answer": chosen.get("answer"),
            "repeated_on_fresh_rounds": chosen.get("repeated"),
            "rounds": record.rounds,
            "block_steps": record.block,
            "round_order_seed": record.seed,
            "confidence": record.confidence,
            "fp32_copy_vs_fp32": record.null_vs_fp32,
            "instrument_error": chosen.get("instrument_error"),
            # Its instance part: an instance's own offset (sd, percent) and its df.
            "instances": chosen.get("instances"),
            "peers": record.peers,
        },
        "fidelity": {
            "gap": quality.get("fidelity_gap") if borrowed else result.fidelity_gap,
            "gaps": {} if borrowed else result.numerics.get("gaps", {}),
            "judged_by": quality.get("by", f"trial {trial.number}"),
            "precision_gap": result.precision_gap,
            "fp32_as_a_candidate": fp32.fidelity_gap if fp32 else None,
            "judging": (fp32.numerics.get("judging") if fp32 else None) or "every figure",
            "noise": "FP32 runs with data-order seeds held out from the candidate's; a "
            "figure is worse only where a one-sided test of the candidate's runs says so",
            # The test's rates: FP32 as a candidate called worse, a 2-unit-worse one caught.
            "test": result.numerics.get("test", {}),
            "tolerance": study_record(study, "tolerance"),
        },
        "lr_rule": study_record(study, "lr_rule") or {"rule": policy.lr_rule},
        "baseline": {
            "batch_size": info.batch_size if info else None,
            "jit_compile": info.jit_compile if info else False,
            "steps_per_execution": info.steps_per_execution if info else 1,
            # Kept out of every trial and of this policy's figures (graphs are timed).
            "dropped_compile_args": info.dropped_compile_args if info else [],
        },
        # The exported SavedModel's signature: input and output names, what each output holds.
        "serving": (info.serving if info else None) or {},
        "feasible": bool(quality.get("trains_like_fp32")) if borrowed else is_feasible(trial),
        "is_fp32": record.best_is_fp32,
        "verdict": record.verdict,
        "study": study.study_name,
        "trial": trial.number,
        "hardware": describe(info.gpus if info else None),
        "versions": {**(info.versions if info else {}), "precsearch": __version__},
        "model_file": study_record(study, "model_file"),
        "notes": info.notes() if info else [],
        # Why each layer group has its dtype (results.explain): one line per group.
        # The probes and the cost model's error against the trials: one line each.
        "probes": probe_summary(study),
        "pinned": _pinned(study),
        "why": why_lines(
            group_effects(study), answer_params(study, record), study_record(study, "probes")
        ),
    }
    return policy


def _pinned(study: Any) -> list[dict[str, Any]]:
    """Layer groups kept float32 because they break in a low dtype: why, in words, and
    the raw evidence (the error, or the non-finite value, on one batch)."""
    pins = (study_record(study, "pins") or {}).values()
    return [
        {**{key: pin.get(key) for key in ("param", "dtype", "layers", "reason", "problem")},
         "why": line}
        for pin, line in zip(pins, pin_summary(study), strict=True)
    ]  # fmt: skip
