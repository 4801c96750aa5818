"""The built-in exporters: the policy file, the trials table and the SavedModel."""

from __future__ import annotations

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
    """``saved_model/``: the model trained under the winner, for ``tf.saved_model.load``
    and TF Serving.

    Its ``serving_default`` signature takes the inputs by the model's input layer names
    and returns the outputs by its output layer names, floating outputs as float32 (what
    each holds, probabilities or logits, is in the policy's manifest under ``serving``).

    A SavedModel needs TensorFlow: Keras writes one on TensorFlow and, through jax2tf, on
    JAX. Where it cannot (PyTorch, or TensorFlow not installed) the model is written as
    ``model.keras`` instead, Keras's own file, which every backend loads.
    """

    name = "saved_model"
    needs_model = True

    def export(self, winner: Winner, directory: Path) -> list[Path]:
        from precsearch.policy.serving import export_model

        return [export_model(winner.model, directory)]
