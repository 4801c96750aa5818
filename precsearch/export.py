"""Writing a study's results into its folder for people and for other programs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["trials_frame", "write_trials_csv"]


def trials_frame(study: Any) -> Any:
    """Every trial of a study as a pandas DataFrame, one row each.

    Columns: ``number``, ``state``, ``status``, ``reason``, ``baseline``, ``speedup``
    with its block spread, ``fidelity_gap``, ``feasible``, samples/s of FP32 and the
    candidate, memory, duration, and each parameter as ``param:<name>``.
    """
    import pandas as pd

    rows = []
    for trial in study.get_trials(deepcopy=False):
        result = trial.user_attrs.get("result") or {}
        blocks = result.get("block_ratios") or {}
        fp32 = result.get("fp32") or {}
        cand = result.get("candidate") or {}
        constraint = (trial.constraints or {}).get("feasible")
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
            "feasible": constraint is not None and constraint <= 0,
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
