"""The built-in exporters: the policy file, the trials table and the SavedModel."""

from __future__ import annotations

import os
from pathlib import Path

from precsearch.plugins import Exporter
from precsearch.records import Winner
from precsearch.results.export import write_trials_csv

__all__ = ["PolicyJson", "SavedModel", "TrialsCsv"]


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
