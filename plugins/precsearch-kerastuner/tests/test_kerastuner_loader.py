from __future__ import annotations

import json
import textwrap

import pytest
from precsearch_kerastuner import KerasTunerLoader, best_values

import precsearch
from precsearch.testing import LoaderContract

MODEL = """
import keras
import numpy as np

precsearch_config = {"batch_size": 32}
hyperparameters = {"units": 24}


def build_model(hp):
    model = keras.Sequential([
        keras.Input((8,)),
        keras.layers.Dense(hp.Int("units", 8, 64, step=8), activation="relu", name="hidden"),
        keras.layers.Dense(2, name="logits"),
    ])
    model.compile(
        optimizer=keras.optimizers.Adam(hp.Choice("lr", [1e-2, 1e-3])),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def train_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8)).astype("float32")
    return x, (x[:, 0] > 0).astype("int64")
"""


def write_model(tmp_path, text=MODEL):
    path = tmp_path / "hyper.py"
    path.write_text(textwrap.dedent(text))
    return path


def write_project(folder, trials):
    """A keras-tuner project folder, in the format keras-tuner 1.4 writes."""
    folder.mkdir(parents=True)
    (folder / "oracle.json").write_text("{}")
    for i, (values, score, status) in enumerate(trials):
        trial = folder / f"trial_{i}"
        trial.mkdir()
        metric = {"direction": "min", "observations": [{"value": [score], "step": 0}]}
        (trial / "trial.json").write_text(
            json.dumps(
                {
                    "trial_id": str(i),
                    "hyperparameters": {"space": [], "values": values},
                    "metrics": {"metrics": {"val_loss": metric}},
                    "score": score,
                    "best_step": 0,
                    "status": status,
                }
            )
        )
    return folder


class TestKerasTunerLoader(LoaderContract):
    plugin_class = KerasTunerLoader

    def make_source(self, tmp_path):
        return write_model(tmp_path)

    def make_bad_source(self, tmp_path):
        return write_model(tmp_path, "def train_data():\n    return 1\n")


def test_values_from_file_defaults_and_best_trial(tmp_path):
    path = write_model(tmp_path)
    model = KerasTunerLoader().load(path).build_model()
    assert model.get_layer("hidden").units == 24  # from hyperparameters = {...}
    project = write_project(
        tmp_path / "tuning" / "proj",
        [
            ({"units": 16, "lr": 0.01}, 0.7, "COMPLETED"),
            ({"units": 40, "lr": 0.001}, 0.3, "COMPLETED"),
            ({"units": 64, "lr": 0.001}, None, "FAILED"),
        ],
    )
    assert best_values(project) == {"units": 40, "lr": 0.001}
    model = KerasTunerLoader(arg=str(project)).load(path).build_model()
    assert model.get_layer("hidden").units == 40
    plain = write_model(tmp_path, MODEL.replace('hyperparameters = {"units": 24}\n', ""))
    assert KerasTunerLoader().load(plain).build_model().get_layer("hidden").units == 8


def test_empty_project_is_a_clear_error(tmp_path):
    (tmp_path / "proj").mkdir()
    with pytest.raises(precsearch.UserInputError, match="no completed keras-tuner trial"):
        best_values(tmp_path / "proj")


@pytest.mark.slow
def test_a_three_trial_study_through_the_loader(tmp_path):
    path = write_model(tmp_path)
    result = precsearch.search(
        str(path),
        loader="kerastuner",
        trials=3,
        steps=20,
        dtypes="float32,bfloat16",
        out=str(tmp_path / "studies"),
        confirm_time=1,
        fp32_runs=3,  # the loader is the subject, not the quality test's power
    )
    assert len(result.trials) == 3
    assert set(result.trials["state"]) == {"COMPLETE"}
    assert result.best_policy == precsearch.load_policy(result.study_dir / "best_policy.json")
    assert result.study.user_attrs["loader"] == "kerastuner"
    layers = {r["id"]: r for r in result.study.user_attrs["model_info"]["layers"]}
    assert layers["hidden"]["params"] == 8 * 24 + 24  # units=24, the file's hyperparameters
