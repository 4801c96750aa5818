"""Writing a study's results into its folder for people and for other programs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from precsearch.objectives import is_feasible
from precsearch.plugins._base import Exporter, Winner

__all__ = [
    "best_policy_with_manifest",
    "PolicyJson",
    "SavedModel",
    "TrialsCsv",
    "best_trial",
    "stored_policy",
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

    confirmed = {
        entry["trial"]: entry
        for entry in (study.user_attrs.get("confirmation") or {}).get("candidates", [])
    }
    best = (study.user_attrs.get("confirmation") or {}).get("best_trial")
    rows = []
    for trial in study.get_trials(deepcopy=False):
        result = trial.user_attrs.get("result") or {}
        blocks = result.get("block_ratios") or {}
        fp32 = result.get("fp32") or {}
        cand = result.get("candidate") or {}
        row: dict[str, Any] = {
            "number": trial.number,
            "state": trial.state.name,
            "status": trial.user_attrs.get("status", trial.state.name.lower()),
            "reason": trial.user_attrs.get("reason", ""),
            "baseline": trial.user_attrs.get("baseline", ""),
            "duplicate_of": trial.user_attrs.get("duplicate_of"),
            "speedup": result.get("speedup"),
            "speedup_blocks_median": blocks.get("median"),
            "speedup_blocks_min": blocks.get("min"),
            "speedup_blocks_max": blocks.get("max"),
            "fidelity_gap": result.get("fidelity_gap"),
            "feasible": is_feasible(trial),
            "objective_speedup": trial.values[0] if trial.values else None,
            "objective_gap": trial.values[1] if trial.values else None,
            "fp32_samples_per_s": fp32.get("samples_per_s"),
            "candidate_samples_per_s": cand.get("samples_per_s"),
            "candidate_step_p10_ms": cand["p10"] * 1e3 if cand else None,
            "candidate_step_median_ms": cand["median"] * 1e3 if cand else None,
            "timed_steps": cand.get("n"),
            "peak_memory_mb": result.get("peak_memory_mb"),
            "duration_s": trial.duration.total_seconds() if trial.duration else None,
        }
        entry = confirmed.get(trial.number) or {}
        for key in ("speedup_vs_fp32", "speedup_vs_global_mixed"):
            figures = entry.get(key) or {}
            for stat in ("median", "min", "max", "rounds"):
                row[f"confirmed_{key}_{stat}"] = figures.get(stat)
        row["best"] = trial.number == best
        for name, value in trial.params.items():
            row[f"param:{name}"] = value
        rows.append(row)
    return pd.DataFrame(rows)


def write_trials_csv(study: Any, path: str | os.PathLike[str]) -> Path:
    """Write :func:`trials_frame` as CSV (atomically) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    trials_frame(study).to_csv(tmp, index=False)
    os.replace(tmp, path)
    return path


def stored_policy(trial: Any) -> Any:
    """The policy a trial ran, from its stored result."""
    from precsearch.policy import Policy

    return Policy.from_dict(trial.user_attrs["result"]["policy"])


def best_trial(study: Any) -> Any | None:
    """The trial whose policy the confirmation chose (``None`` before confirmation)."""
    record = study.user_attrs.get("confirmation") or {}
    number = record.get("best_trial")
    if number is None:
        return None
    return study.trials[number]


def best_policy_with_manifest(study: Any) -> Any:
    """The confirmed best policy, its manifest filled from the study's storage.

    Raises:
        UserInputError: The study has no confirmation yet.
    """
    import precsearch
    from precsearch.errors import UserInputError
    from precsearch.hardware import describe

    record = study.user_attrs.get("confirmation")
    trial = best_trial(study)
    if record is None or trial is None:
        raise UserInputError(
            f"study {study.study_name!r} has no confirmed best policy yet: run "
            "`precsearch run` on it to the end"
        )
    policy = stored_policy(trial)
    info = study.user_attrs.get("model_info") or {}
    chosen = record.get("best") or {}
    result = trial.user_attrs["result"]
    policy.manifest = {
        "confirmed": {
            "speedup_vs_fp32": chosen.get("speedup_vs_fp32"),
            "speedup_vs_global_mixed": chosen.get("speedup_vs_global_mixed"),
            "fidelity_gap": result.get("fidelity_gap"),
            "rounds": record.get("rounds"),
            "block_steps": record.get("block"),
            "fp32_copy_vs_fp32": record.get("null_vs_fp32"),
        },
        "feasible": is_feasible(trial),
        "is_fp32": record.get("best_is_fp32", False),
        "verdict": record.get("verdict", ""),
        "study": study.study_name,
        "trial": trial.number,
        "hardware": describe(info.get("gpus")),
        "versions": {**info.get("versions", {}), "precsearch": precsearch.__version__},
        "model_file": study.user_attrs.get("model_file"),
    }
    return policy


class PolicyJson(Exporter):
    """``best_policy.json``: the winner with its manifest, for ``load_policy``."""

    name = "policy_json"

    def export(self, winner: Winner, directory: Path) -> list[Path]:
        return [winner.policy.save(directory / "best_policy.json")]


class TrialsCsv(Exporter):
    """``trials.csv``: every trial, its parameters, figures and confirmation."""

    name = "trials_csv"

    def export(self, winner: Winner, directory: Path) -> list[Path]:
        return [write_trials_csv(winner.study, directory / "trials.csv")]


class SavedModel(Exporter):
    """``saved_model/``: the model trained under the winner, via ``model.export()``.

    Its serving signature takes and returns float32 (the output layer computes in
    float32); load it with ``tf.saved_model.load``.
    """

    name = "saved_model"
    needs_model = True

    def export(self, winner: Winner, directory: Path) -> list[Path]:
        import shutil

        path = directory / "saved_model"
        tmp = directory / "saved_model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        winner.model.export(str(tmp), verbose=False)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
        return [path]
