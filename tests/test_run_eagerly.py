"""``run_eagerly=True`` in the user's training is dropped (steps are timed as graphs), and
precsearch says so: a note in the run's output and in the policy's manifest."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
import pytest

from precsearch.model_file import load_model_file
from precsearch.records import ModelInfo

MODEL = """
import keras
import numpy as np

def build_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    {compile}
    return model

def train_data():
    return np.zeros((64, 4), "float32"), np.zeros((64,), "int64")
"""

COMPILE_KWARGS = """
def compile_kwargs():
    return {"loss": "sparse_categorical_crossentropy", "run_eagerly": True}
"""

COMPILE = 'model.compile(loss="sparse_categorical_crossentropy", {args})'
WAYS = {
    "compile": COMPILE.format(args="run_eagerly=True"),
    "attribute": COMPILE.format(args="") + "\n    model.run_eagerly = True",
    "compile_kwargs": "pass",
    "graph": COMPILE.format(args=""),
}


def model_info(tmp_path, way: str) -> ModelInfo:
    from precsearch.engine.problem import Problem

    path = tmp_path / f"{way}.py"
    text = MODEL.replace("{compile}", WAYS[way])
    path.write_text(text + (COMPILE_KWARGS if way == "compile_kwargs" else ""))
    return Problem(load_model_file(path)).info


@pytest.mark.parametrize("way", ["compile", "attribute", "compile_kwargs"])
def test_run_eagerly_anywhere_in_the_users_training_is_noted(tmp_path, way):
    info = model_info(tmp_path, way)
    assert info.dropped_compile_args == ["run_eagerly"]
    assert info.notes() == [
        "run_eagerly=True in your training is ignored: precsearch trains and times every "
        "step as a traced graph (eager steps are no measure of a policy's speed), so every "
        "figure here is for graph execution"
    ]


def test_a_graph_training_has_no_note(tmp_path):
    info = model_info(tmp_path, "graph")
    assert info.dropped_compile_args == [] and info.notes() == []


def test_the_manifest_carries_the_models_notes(monkeypatch):
    from precsearch import Policy
    from precsearch.results import export

    info = ModelInfo(
        source="m.py", fingerprint="f", model_name="m", model_class="Sequential", params=1,
        layers=[], output_layers=[], batch_size=32, train_examples=64,
        dropped_compile_args=["run_eagerly"],
    )  # fmt: skip
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_user_attr("model_info", info.to_dict())
    study.add_trial(
        optuna.trial.create_trial(
            values=[1.0, 0.0], user_attrs={"result": {"policy": Policy().to_dict()}}
        )
    )
    record = SimpleNamespace(
        best={}, best_trial=0, rounds={}, block=5, null_vs_fp32={}, bar=1.0, peers={},
        best_is_fp32=True, verdict="FP32", best_policy=Policy().to_dict(), seed=0,
        confidence=0.95,
    )  # fmt: skip
    monkeypatch.setattr(export, "confirmation_of", lambda study: record)
    manifest = export.best_policy_with_manifest(study).manifest
    assert manifest["notes"] == info.notes()
    assert manifest["baseline"]["dropped_compile_args"] == ["run_eagerly"]
