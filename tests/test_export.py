from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from helpers import MODELS, run_cli

import precsearch
from precsearch.loaders import load_model_file


def check_spread(figures):
    assert figures["min"] <= figures["median"] <= figures["max"]
    assert figures["rounds"] == 5


@pytest.mark.slow
def test_best_policy_file_has_the_manifest_and_applies(tiny_study):
    folder, first, second = tiny_study
    assert "Answer:" in second.stdout
    policy = precsearch.load_policy(folder / "best_policy.json")
    manifest = policy.manifest
    confirmed = manifest["confirmed"]
    check_spread(confirmed["speedup_vs_fp32"])  # from fresh rounds: the copy's, for FP32
    copy = confirmed["fp32_copy_vs_fp32"]  # the instrument's error
    check_spread(copy)
    assert 0.5 < copy["median"] < 2
    assert confirmed["fidelity_gap"] is not None
    assert manifest["feasible"] is True
    assert manifest["baseline"] == {
        "batch_size": 32,
        "jit_compile": False,
        "steps_per_execution": 1,
        "dropped_compile_args": [],
    }
    assert manifest["study"] == "tiny" and isinstance(manifest["trial"], int)
    assert {"tensorflow", "keras", "precsearch"} <= set(manifest["versions"])
    assert {"cpu", "cpu_low_precision_flags", "gpus"} <= set(manifest["hardware"])
    assert set(confirmed["peers"]) == {"global", "graph_rewrite"}
    for peer in confirmed["peers"].values():
        # A peer is a ratio only when it trained like FP32.
        assert (peer["status"] == "feasible") == ("vs_fp32" in peer), peer
    if manifest["is_fp32"]:
        assert confirmed["speedup_vs_fp32"] == copy
        assert "FP32 as you train it is the answer" in manifest["verdict"]
    else:
        record = precsearch.load_study(folder).confirmation
        chosen = next(c for c in record.candidates if c["trial"] == manifest["trial"])
        assert chosen["speedup_vs_fp32"]["median"] > record.bar  # chosen on its selection
        assert "a copy of FP32 measures" in manifest["verdict"]
    model = load_model_file(MODELS / "mlp.py").build_model()
    policy.apply(model)
    assert model.get_layer("logits").compute_dtype == "float32"


@pytest.mark.slow
def test_saved_model_loads_and_predicts(tiny_study):
    import tensorflow as tf

    folder, _, _ = tiny_study
    loaded = tf.saved_model.load(str(folder / "saved_model"))
    out = loaded.serve(tf.constant(np.zeros((3, 16), "float32")))
    assert out.shape == (3, 4) and out.dtype == tf.float32
    assert np.isfinite(out.numpy()).all()


@pytest.mark.slow
def test_trials_csv_has_the_confirmation(tiny_study):
    import pandas as pd

    folder, _, _ = tiny_study
    frame = pd.read_csv(folder / "trials.csv")
    assert frame["best"].sum() == 1
    confirmed = frame.dropna(subset=["confirmed_speedup_vs_fp32_median"])
    assert len(confirmed) >= 1
    assert (
        confirmed["confirmed_speedup_vs_fp32_min"] <= confirmed["confirmed_speedup_vs_fp32_max"]
    ).all()


@pytest.mark.slow
def test_show_and_export(tiny_study, tmp_path):
    folder, _, _ = tiny_study
    shown = run_cli("show", str(folder))
    assert shown.returncode == 0, shown.stderr
    assert "confirmed vs FP32" in shown.stdout and "Answer:" in shown.stdout
    assert "Dense (" in shown.stdout
    exported = run_cli("export", str(folder), "--to", str(tmp_path / "out"))
    assert exported.returncode == 0, exported.stderr
    for name in ("best_policy.json", "trials.csv", "saved_model"):
        assert (tmp_path / "out" / name).exists()
    missing = run_cli("show", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no study" in missing.stderr


@pytest.mark.slow
def test_notebook_api_gives_the_same_files(tmp_path):
    result = precsearch.search(
        str(MODELS / "mlp.py"),
        trials=2,
        steps=20,
        dtypes="float32,bfloat16",
        out=str(tmp_path),
        study_name="api",
        rounds=5,
        progress=sys.stderr,
    )
    folder = tmp_path / "api"
    for name in ("best_policy.json", "trials.csv", "saved_model", "study.journal"):
        assert (folder / name).exists()
    assert len(result.trials) == 2 and "status" in result.trials.columns
    assert not result.pareto.empty
    assert result.best_policy == precsearch.load_policy(folder / "best_policy.json")
    assert result.reference.status == "ok"
    again = precsearch.load_study(folder)
    assert len(again.trials) == 2 and again.confirmation == result.confirmation
    paths = again.export(tmp_path / "copy")
    assert json.loads(paths["best_policy.json"].read_text())["format"] == "precsearch.policy/1"


@pytest.mark.slow
def test_notebook_api_with_a_build_function(tmp_path):
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")

    def build():
        return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(2)])

    with pytest.warns(UserWarning, match="not isolated"):
        result = precsearch.search(
            build,
            (x, y),
            compile_kwargs=lambda: {
                "optimizer": "adam",
                "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            },
            trials=2,
            steps=20,
            dtypes="float32,bfloat16",
            out=str(tmp_path),
        )
    assert result.study.study_name == "build"
    assert result.best_policy is not None
    assert (tmp_path / "build" / "saved_model").exists()


def test_import_precsearch_loads_no_search_machinery():
    import subprocess

    code = (
        "import sys, precsearch\n"
        "assert not {'optuna', 'pandas', 'tensorflow'} & set(sys.modules), sys.modules.keys()\n"
        "assert callable(precsearch.search)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
