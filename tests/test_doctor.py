"""`precsearch doctor`, the numerics guard and `precsearch train` (issue: short trials,
long runs)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import MODELS, run_cli, tensorboard_scalars

from precsearch import Policy
from precsearch.engine.problem import Problem
from precsearch.model_file import load_model_file

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
    # The budget check a study starts with: no validation data, a training loss that falls.
    assert report["judging"]["figures"] == {"loss": ""} and not report["judging"]["nothing"]
    text = run_cli("doctor", str(MODELS / "pitfalls.py"))
    assert text.returncode == 0 and "Advice:" in text.stdout and "amplify" in text.stdout
    assert "FP32's runs can judge a candidate on: loss" in text.stdout


@pytest.mark.slow
def test_doctor_names_token_ids_through_a_float_input_and_the_dtype_they_break():
    done = run_cli("doctor", str(MODELS / "text_transformer.py"), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert "indices" in report["errors"]["bfloat16"]  # an id rounded out of range
    advice = " ".join(report["advice"])
    assert "the input carries integer values up to 1999 as floats" in advice
    assert "bfloat16 holds integers exactly only up to 256" in advice
    assert "give the Input dtype int32" in advice


# The classic pitfalls of tests/models/classic_pitfalls.py (and pitfalls.py's amplify):
# the layer, the dtype, the class, and words of its line.
CLASSIC = [
    ("classic_pitfalls", "naive_softmax", "float16", "exp", "exp of its inputs (up to"),
    ("classic_pitfalls", "standardize", "float16", "square", "squares of its inputs (up to"),
    ("classic_pitfalls", "mean_by_sum", "float16", "sum", "16384 elements an example"),
    ("classic_pitfalls", "gram_det", "float16", "error", "no kernel for what it computes"),
    ("classic_pitfalls", "gram_det", "bfloat16", "error", "no kernel for what it computes"),
    ("pitfalls", "amplify", "float16", "overflow", "beyond float16's 65504"),
]


def _layer_pitfalls(name: str, **kwargs) -> list[dict]:
    from precsearch.engine.layer_checks import layer_pitfalls

    spec = load_model_file(MODELS / f"{name}.py")
    return layer_pitfalls(spec.build_model(), spec.train_data()[0][:32], **kwargs)


@pytest.mark.parametrize(("model", "layer", "dtype", "kind", "words"), CLASSIC)
def test_each_classic_pitfall_is_found_in_its_layer_on_one_batch(model, layer, dtype, kind, words):
    found = {(f["layer"], f["dtype"]): f for f in _layer_pitfalls(model)}
    finding = found[(layer, dtype)]
    assert finding["kind"] == kind
    assert finding["line"].startswith(f"{layer} (") and words in finding["line"]
    assert "\n" not in finding["line"]
    # Nothing else in the model is blamed: the layers before them are harmless.
    assert {key[0] for key in found} <= {row[1] for row in CLASSIC if row[0] == model}


def test_a_model_without_pitfalls_has_no_findings():
    assert _layer_pitfalls("mlp") == []


def test_a_layer_far_slower_in_a_low_dtype_is_found_by_the_clock():
    # The clock is injected: the layer itself moves it, 1 a call in float32 and 50 in
    # bfloat16, as a layer without a fast bfloat16 kernel would.
    import keras

    ticks = [0.0]

    class Ticking(keras.layers.Layer):
        def call(self, x):
            ticks[0] += 50.0 if self.compute_dtype == "bfloat16" else 1.0
            return x * 2.0

    model = keras.Sequential([keras.Input((4,)), Ticking(name="ticking")])
    found = layer_pitfalls_of(model, clock=lambda: ticks[0])
    assert [(f["layer"], f["dtype"], f["kind"]) for f in found] == [("ticking", "bfloat16", "slow")]
    assert "50x slower in bfloat16 than in float32 here" in found[0]["line"]


def layer_pitfalls_of(model, **kwargs) -> list[dict]:
    from precsearch.engine.layer_checks import layer_pitfalls

    return layer_pitfalls(model, np.ones((8, 4), "float32"), **kwargs)


@pytest.mark.slow
def test_doctor_says_each_classic_pitfall_in_one_line_naming_its_layer():
    done = run_cli("doctor", str(MODELS / "classic_pitfalls.py"), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    kinds = {(f["layer"], f["dtype"]): f["kind"] for f in report["pitfalls"]}
    expected = {(layer, dtype): kind for model, layer, dtype, kind, _ in CLASSIC
                if model == "classic_pitfalls"}  # fmt: skip
    assert kinds == expected
    for finding in report["pitfalls"]:
        assert finding["line"] in report["advice"]


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
    # The guard's TensorBoard scalars, one point per step up to the one it stopped at.
    logged = tensorboard_scalars(tmp_path / "tb")
    assert [p.step for p in logged["guard/gradient_norm"]] == [1, 2, 3, 4]
    assert all(math.isfinite(p.value) for p in logged["guard/gradient_norm"][:3])
    assert [p.value for p in logged["guard/skipped_steps"]] == [0.0] * 4  # no loss scale


def test_the_guard_stops_on_a_loss_scale_that_collapses(tmp_path):
    from precsearch import LossScale

    problem = Problem(load_model_file(MODELS / "overflowing_gradient.py"))
    # The forward pass fits float16 and every gradient overflows: each step is skipped
    # and halves the scale, 2 -> 1 -> 0.5, below 1 after the second.
    policy = Policy(default="mixed_float16", loss_scale=LossScale(initial_scale=2.0), batch_size=32)
    model = problem.model_for(policy, seed=0)
    weights = model.get_weights()
    guard = policy.callbacks()[0]
    history = model.fit(
        problem.dataset(32, seed=0), epochs=1, steps_per_epoch=30, callbacks=[guard], verbose=0
    )
    assert guard.step == 2
    assert guard.stopped.startswith(
        "precsearch guard stopped training: the loss scale collapsed to 0.5 at step 2 "
        "under policy default 'mixed_float16';"
    )
    assert math.isfinite(history.history["loss"][-1])  # the loss itself never broke
    # Both steps were skipped: the weights are the ones it started with.
    assert all(np.array_equal(a, b) for a, b in zip(weights, model.get_weights(), strict=True))


def open_files_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open (Linux: ``/proc/self/fd``)."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("no /proc/self/fd to list open files")
    found = []
    for fd in fds.iterdir():
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue  # closed since it was listed
        if target.is_relative_to(folder):
            found.append(str(target))
    return found


def test_the_guard_closes_its_tensorboard_writer_when_training_ends(tmp_path):
    problem = Problem(load_model_file(MODELS / "mlp.py"))
    policy = Policy(batch_size=32)
    model = problem.model_for(policy, seed=0)
    guard = policy.callbacks(log_dir=tmp_path / "tb")[0]
    model.fit(
        problem.dataset(32, seed=0), epochs=1, steps_per_epoch=3, callbacks=[guard], verbose=0
    )
    assert not guard.stopped
    assert open_files_under(tmp_path / "tb") == []
    logged = tensorboard_scalars(tmp_path / "tb")
    assert [p.step for p in logged["guard/gradient_norm"]] == [1, 2, 3]
    # A second run with the same guard logs again, and closes again.
    model.fit(
        problem.dataset(32, seed=1), epochs=1, steps_per_epoch=2, callbacks=[guard], verbose=0
    )
    assert open_files_under(tmp_path / "tb") == []
    logged = tensorboard_scalars(tmp_path / "tb")
    assert [p.step for p in logged["guard/gradient_norm"]] == [1, 2, 3, 4, 5]


def test_the_guard_reads_a_loss_scale_mirrored_across_replicas():
    import keras
    import tensorflow as tf

    # One replica is enough: under a MirroredStrategy the loss scale is a
    # MirroredVariable, which float() refuses.
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        model.compile(optimizer=optimizer, loss="mse")
    guard = Policy(batch_size=8).callbacks()[0]
    x, y = np.ones((16, 4), "float32"), np.ones((16, 2), "float32")
    model.fit(x, y, batch_size=8, epochs=1, callbacks=[guard], verbose=0)
    assert guard.step == 2 and not guard.stopped
    assert guard._scale == 2.0**15  # keras' initial dynamic scale, never halved


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
    assert "accuracy" in done.stdout
    # 15 steps are part of one epoch: one checkpoint, at its end.
    checkpoints = out / "policy" / "checkpoints"
    assert [p.name for p in checkpoints.iterdir()] == ["epoch_001.weights.h5"]
    for label in ("policy", "fp32"):
        assert f"{label} SavedModel: {out / label / 'saved_model'}" in done.stdout
        loaded = tf.saved_model.load(str(out / label / "saved_model"))
        out_ = loaded.serve(tf.constant(np.zeros((3, 8, 8, 1), "float32")))
        assert out_.shape == (3, 10) and out_.dtype == tf.float32, label
