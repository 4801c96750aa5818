"""`precsearch doctor`, the numerics guard and `precsearch train` (issue: short trials,
long runs)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import MODELS, run_cli

from precsearch import Policy
from precsearch.engine.problem import Problem
from precsearch.loaders import load_model_file

ROOT = MODELS.parents[1]


@pytest.mark.slow
def test_doctor_reports_a_float16_softmax_odd_widths_and_a_float16_overflow():
    done = run_cli("doctor", str(MODELS / "pitfalls.py"), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert {"layer": "softmax16", "what": "softmax", "dtype": "float16"} in report["not_float32"]
    assert [w["layer"] for w in report["widths"]] == ["odd"]  # 30 units; 16 and 8 are fine
    fp32 = {row["layer"]: row for row in report["probe"]["float32"]}
    assert fp32["amplify"]["max_activation"] > 65504  # what float16 cannot hold
    fp16 = {row["layer"]: row for row in report["probe"]["float16"]}
    assert fp16["amplify"]["nonfinite"] and not fp32["amplify"]["nonfinite"]
    advice = " ".join(report["advice"])
    assert "softmax softmax16 computes in float16" in advice
    assert "activations overflow float16 in amplify" in advice
    assert "odd (30)" in advice
    assert set(report["matmul"]["vs_float32"]) == {"float32", "bfloat16", "float16"}
    text = run_cli("doctor", str(MODELS / "pitfalls.py"))
    assert text.returncode == 0 and "Advice:" in text.stdout and "amplify" in text.stdout


def test_doctor_on_a_broken_model_file_exits_2():
    done = run_cli("doctor", str(ROOT / "tests" / "data" / "bad" / "models" / "no_loss.py"))
    assert done.returncode == 2 and "no loss anywhere" in done.stderr


def test_the_guard_stops_a_model_that_turns_nan_at_step_k_within_that_step(tmp_path):
    problem = Problem(load_model_file(MODELS / "nan_after_3.py"))
    policy = Policy(batch_size=32)
    model = problem.model_for(policy, seed=0)
    data = problem.dataset(32, seed=0)
    probe_data = next(iter(data))
    guard = policy.callbacks(log_dir=tmp_path / "tb", probe_data=probe_data)[0]
    history = model.fit(data, epochs=1, steps_per_epoch=20, callbacks=[guard], verbose=0)
    losses = history.history["loss"]
    assert guard.step == 4  # the first NaN step is the fourth, and training ended there
    assert "the loss became nan at step 4" in guard.stopped
    assert "likely layers: poison;" in guard.stopped  # not the layers it poisoned
    # The step that went wrong was left out: the weights stay finite.
    assert all(np.isfinite(w).all() for w in model.get_weights())
    assert not math.isfinite(losses[-1])
    assert list((tmp_path / "tb").iterdir())  # TensorBoard event file written


def test_the_guard_stops_on_a_loss_scale_that_collapses(tmp_path):
    from precsearch import LossScale

    problem = Problem(load_model_file(MODELS / "pitfalls.py"))
    # float16 everywhere but the output: the amplified activations overflow on every step.
    policy = Policy(default="mixed_float16", loss_scale=LossScale(initial_scale=2.0), batch_size=32)
    model = problem.model_for(policy, seed=0)
    guard = policy.callbacks()[0]
    model.fit(
        problem.dataset(32, seed=0), epochs=1, steps_per_epoch=30, callbacks=[guard], verbose=0
    )
    assert guard.stopped and guard.step < 30
    assert "amplify" in guard.stopped or "loss" in guard.stopped


@pytest.mark.slow
def test_train_writes_a_saved_model_that_loads_and_predicts(tmp_path):
    import tensorflow as tf

    policy = Policy(types={"MaxPooling2D": "mixed_bfloat16"}, batch_size=128, base_batch_size=64)
    policy.lr_rule = "linear"
    path = policy.save(tmp_path / "best_policy.json")
    out = tmp_path / "run"
    done = run_cli(
        "train", str(ROOT / "studies" / "digits_cnn" / "model.py"), "--policy", str(path),
        "--steps", "15", "--fp32-baseline", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "policy" in done.stdout and "fp32" in done.stdout and "accuracy" in done.stdout
    assert list((out / "policy" / "checkpoints").glob("*.weights.h5"))
    loaded = tf.saved_model.load(str(out / "policy" / "saved_model"))
    out_ = loaded.serve(tf.constant(np.zeros((3, 8, 8, 1), "float32")))
    assert out_.shape == (3, 10) and out_.dtype == tf.float32
    assert (out / "fp32" / "saved_model").exists()
