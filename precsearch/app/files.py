"""The study's files for people: the exported answer, trials.csv, TensorBoard runs and
report.html, each written whatever happened to the others."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from precsearch.errors import one_line
from precsearch.plugins import create, get
from precsearch.records import Winner
from precsearch.results.export import best_policy_with_manifest, write_trials_csv
from precsearch.results.html_report import write_report
from precsearch.results.tensorboard_logs import TensorBoardLog

__all__ = ["export_winner", "write_study_files"]


def export_winner(
    study: Any,
    directory: Path,
    exporters: list[str],
    model_exports: Callable[[Any, list[str]], Any],
) -> dict[str, Path]:
    """Run exporter plugins on the confirmed best policy; return what they wrote.

    Exporters that need the trained model go through ``model_exports(policy, names)``
    (a worker trains the policy for the budget once for all of them); the others get
    the study here.
    """
    directory.mkdir(parents=True, exist_ok=True)
    best = best_policy_with_manifest(study)
    written: list[Path] = []
    needs_model = [
        spec for spec in exporters if get("exporter", spec.partition("=")[0]).needs_model
    ]
    for spec in exporters:
        if spec not in needs_model:
            written += create("exporter", spec).export(Winner(policy=best, study=study), directory)
    if needs_model:
        written += [Path(p) for p in model_exports(best, needs_model)]
    return {path.name: path for path in written}


def write_study_files(
    study: Any, study_dir: Path, paths: dict[str, Path | str], logs: TensorBoardLog
) -> str:
    """trials.csv, the TensorBoard runs (earlier trials too, on a resume) and
    report.html into ``study_dir`` (each written one goes into ``paths``); what went
    wrong writing them, if anything.

    Each file is written whatever happened to the others: they are what the trials
    measured, and one that fails (a full disk, a figure a report cannot draw) must not
    take the rest with it.
    """
    writers = {
        "trials.csv": lambda: write_trials_csv(study, study_dir / "trials.csv"),
        "tensorboard": lambda: logs.write_all(study),
        "report.html": lambda: write_report(study, study_dir / "report.html"),
    }
    failed = []
    for name, write in writers.items():
        try:
            paths[name] = write()
        except Exception as exc:  # noqa: BLE001 - the study's last files: keep going
            failed.append(f"{name}: {one_line(exc)}")
    return f"writing the study's files failed ({'; '.join(failed)})" if failed else ""
