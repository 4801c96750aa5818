from __future__ import annotations

import pandas as pd
import pytest
from helpers import MODELS, run_cli

from precsearch.app.run import run_study
from precsearch.results.report import SPEED_LEGEND
from precsearch.stored import answered_without_training
from precsearch.study.options import SearchOptions
from precsearch.study.space import SearchSpace, SpaceOptions
from precsearch.study.storage import open_storage, open_study


@pytest.mark.slow
def test_tiny_cli_study_writes_every_trial_and_resumes(tiny_study):
    folder, first, second = tiny_study
    assert "Feasible Pareto front" in first.stdout and "trials.csv" in first.stdout
    # The table after the resume shows the front of all six trials, baselines labelled.
    study = open_study("tiny", open_storage(None, folder))
    front = [t for t in study.best_trials if "duplicate_of" not in t.user_attrs]
    table = second.stdout.split("Feasible Pareto front", 1)[1].split("\n\n", 1)[0]
    # The header, its rule, a row per trial on the front, then the legend line.
    lines = table.splitlines()
    assert lines[-1].strip() == SPEED_LEGEND
    rows = [line.split()[0] for line in lines[2:-1]]
    assert sorted(rows) == sorted(str(t.number) for t in front)
    fp32_on_front = any(t.user_attrs.get("baseline") == "fp32" for t in front)
    assert ("[fp32]" in table) == fp32_on_front
    assert "best feasible" in first.stderr
    frame = pd.read_csv(folder / "trials.csv")
    # Six new trials in two runs of three; a sampler's repeat of a measured policy is
    # stored (with its earlier figures) but not counted, nor is a proposal the pins
    # answered without training (a group that trained worse is pinned float32).
    assert list(frame["number"]) == list(range(len(frame)))
    answered = [t.number for t in study.trials if answered_without_training(t)]
    assert (frame["duplicate_of"].isna() & ~frame["number"].isin(answered)).sum() == 6
    assert set(frame["status"]) <= {"ok", "infeasible", "too_slow", "failed"}
    assert sorted(frame["baseline"].dropna()) == ["fp32", "global_bfloat16"]
    assert {"param:dtype:Dense", "param:batch_size", "param:jit_compile"} <= set(frame.columns)
    assert "Overhead" in second.stdout


@pytest.mark.slow
def test_trials_keep_their_results_in_the_storage(tiny_study):
    folder, _, _ = tiny_study
    study = open_study("tiny", open_storage(None, folder))
    trial = study.trials[0]
    result = trial.user_attrs["result"]
    assert result["status"] == "ok" and len(result["curve"]["loss"]) <= 256
    assert trial.constraints["fidelity"] <= 0


def test_bad_model_file_and_flags_exit_2(tmp_path):
    missing = run_cli("run", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    bad = tmp_path / "bad.py"
    bad.write_text("def build_model(:\n")
    broken = run_cli("run", str(bad), "--out", str(tmp_path))
    assert broken.returncode == 2 and "syntax error" in broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1
    flag = run_cli("run", str(MODELS / "mlp.py"), "--trials", "zero")
    assert flag.returncode == 2 and len(flag.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_nan_policy_is_an_infeasible_trial_and_the_study_completes(tmp_path):
    # The study completes to its answer; how long the confirmation times is not the subject.
    options = SearchOptions(
        trials=2, steps=20, out=str(tmp_path), dtypes="float32,bfloat16", in_process=True,
        confirm_time=1, fp32_runs=3,
    )  # fmt: skip
    run = run_study(MODELS / "nan_in_bf16.py", options)
    by_label = {t.user_attrs.get("baseline"): t for t in run.study.trials}
    bf16 = by_label["global_bfloat16"]
    assert bf16.state.name == "COMPLETE"
    assert bf16.user_attrs["status"] == "infeasible" and "non-finite" in bf16.user_attrs["reason"]
    assert bf16.constraints["fidelity"] > 0
    assert by_label["fp32"].constraints["fidelity"] <= 0


def test_group_by_type_on_mobilenet_v2_is_one_parameter_per_class():
    import keras

    from precsearch.policy.layers import model_layers

    model = keras.applications.MobileNetV2(
        weights=None, alpha=0.35, input_shape=(96, 96, 3), classes=10
    )
    info = {"layers": model_layers(model), "batch_size": 32, "train_examples": 1000, "gpus": []}
    # Every floating class is a parameter in the independent space (tests/test_casts.py
    # has the cast-aware one, where only the convolutions are).
    independent = SpaceOptions(group_by="type", casts="independent", dtypes=["float32", "bfloat16"])
    space = SearchSpace(info, independent)
    dtype_params = sorted(p for p in space.choices() if p.startswith("dtype:"))
    classes = sorted({layer["class"] for layer in info["layers"] if not layer["output"]})
    assert dtype_params == [f"dtype:{c}" for c in classes]
    assert "dtype:DepthwiseConv2D" in dtype_params and "dtype:Dense" not in dtype_params
    blocks = SearchSpace(info, SpaceOptions(group_by="block", dtypes=["float32", "bfloat16"]))
    assert "dtype:block_3" in blocks.choices()
    policy = blocks.policy(
        {
            **{p: "float32" for p in blocks.choices() if p.startswith("dtype:")},
            "dtype:block_3": "bfloat16",
            "batch_size": 32,
            "jit_compile": False,
        }
    )
    assigned = policy.assignments(model)
    assert (
        assigned["block_3_expand"] == "mixed_bfloat16" and assigned["block_4_expand"] == "float32"
    )


@pytest.mark.slow
def test_a_trial_trains_data_parallel_under_the_mirrored_strategy(tmp_path):
    """Two logical CPU devices stand in for two GPUs."""
    import os
    import subprocess
    import sys

    args = [
        "run", str(MODELS / "mlp.py"), "--strategy", "mirrored", "--out", str(tmp_path),
        "--trials", "2", "--steps", "20", "--dtypes", "float32,bfloat16", "--confirm", "0",
        "--fp32-runs", "3",
        # how fast bfloat16 is depends on the CPU: a slower trial must still train to the end
        "--keep-slow", "--watchdog", "100",
    ]  # fmt: skip
    env = {**os.environ, "PRECSEARCH_CPU_REPLICAS": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "precsearch", *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    study = open_study("mlp", open_storage(None, tmp_path / "mlp"))
    assert study.user_attrs["model_info"]["replicas"] == 2
    assert [t.user_attrs["status"] for t in study.trials] == ["ok", "ok"]
