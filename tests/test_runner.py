from __future__ import annotations

import json
import math

import pytest
from helpers import MODELS, sign_data, tiny_model

from precsearch import LossScale, Policy
from precsearch.engine.references import References
from precsearch.engine.runner import Runner
from precsearch.model_file import load_model_file
from precsearch.records import Budget, TrialResult

# Trials here test numerics: they train to the end even where this CPU makes them slow.
BUDGET = Budget(steps=30, warmup=2, block=5, stop_slow=False, ref_seeds=3)
TICK = 1 / 32  # seconds each timed call takes on the even clock (exact in binary)


class EvenClock:
    """A clock on which every timed call takes one tick: each read moves it on by one,
    and a call is timed between two reads."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.reads * TICK


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    work = tmp_path_factory.mktemp("work")
    return Runner(
        load_model_file(MODELS / "mlp.py"), work_dir=work, budget=BUDGET, clock=EvenClock()
    )


def test_fp32_against_fp32_is_feasible_with_speedup_near_one(runner):
    result = runner.try_policy(Policy())
    assert result.status == "ok", result.reason
    assert result.fidelity_gap is not None and result.fidelity_gap <= 1.0
    spread = result.block_ratios
    # Same samples per call on both sides, every call one tick: the instrument reads
    # exactly 1 (how close to 1 a real clock reads is benchmarks/' repeatability).
    assert result.speedup == pytest.approx(1.0, abs=1e-12)
    assert result.fp32.p10 == result.candidate.p10 == pytest.approx(TICK, abs=1e-12)
    assert spread["low"] <= spread["estimate"] == result.speedup <= spread["high"]
    assert spread["min"] <= spread["median"] <= spread["max"] and spread["rounds"] >= 3
    assert result.fp32.n == result.candidate.n >= 3 * 10
    assert result.fp32.min <= result.fp32.p10 <= result.fp32.median <= result.fp32.max
    # Judged at the budget's samples; the curve goes on for the time to quality at most.
    assert result.numerics["evaluated_at"] == BUDGET.steps * 32
    assert BUDGET.steps * 32 <= result.curve["samples"][-1] <= 1.5 * BUDGET.steps * 32
    assert {"loss", "metric", "metric_name"} <= set(result.val)
    assert result.peak_memory_mb > 0 and result.memory_kind == "rss"
    assert {"reference", "build", "trace", "warmup", "measured", "total"} <= set(result.timings)


def test_bfloat16_mlp_is_finite_and_feasible(runner):
    result = runner.try_policy(Policy(default="mixed_bfloat16"))
    assert result.status == "ok", result.reason
    assert all(math.isfinite(v) for v in result.curve["loss"])
    # The speedup is the geometric mean of the block pairs' ratios (each block's median
    # call), as the confirmation's rounds are.
    ratios = result.block_ratios
    assert result.speedup == pytest.approx(ratios["estimate"])
    assert ratios["min"] <= result.speedup <= ratios["max"]
    assert result.candidate.samples_per_s == pytest.approx(32 / result.candidate.p10)
    # The speedup is read off the runner's clock: every call one tick on both sides.
    assert result.speedup == pytest.approx(1.0, abs=1e-12)
    assert result.candidate.p10 == pytest.approx(TICK, abs=1e-12)


def test_dynamic_float16_records_the_loss_scale(runner):
    # A scale far too high overflows float16 gradients: each overflowing step is skipped
    # and the scale halves until the steps fit, all of it on record.
    policy = Policy(default="mixed_float16", loss_scale=LossScale(initial_scale=2.0**24))
    result = runner.try_policy(policy, BUDGET)
    numerics = result.numerics
    scales = numerics["loss_scale"]
    assert len(scales) == len(result.curve["loss"]) >= BUDGET.steps  # one per point
    before = [2.0**24, *scales[:-1]]
    halvings = sum(a < b for b, a in zip(before, scales, strict=True))
    # Every skipped step halved the scale; the count covers the timed calls past the curve.
    assert 1 <= halvings <= numerics["skipped_steps"]
    assert 0 < numerics["skipped_share"] < 1
    assert numerics["min_loss_scale"] <= min(scales) < 2.0**24  # the least over every call
    assert all(math.isfinite(v) for v in result.curve["loss"])


def test_fixed_loss_scale_far_too_high_is_infeasible(runner):
    policy = Policy(
        default="mixed_float16", loss_scale=LossScale(dynamic=False, initial_scale=2e30)
    )
    result = runner.try_policy(policy)
    assert result.status == "infeasible"
    assert "non-finite" in result.reason or "overflow" in result.reason


def test_result_round_trips_through_json(runner):
    result = runner.try_policy(Policy(default="mixed_bfloat16"))
    data = json.loads(result.to_json(max_points=8))
    assert len(data["curve"]["loss"]) == 8
    assert data["curve"]["samples"][-1] == result.curve["samples"][-1]
    again = TrialResult.from_dict(json.loads(result.to_json()))
    assert again == result


def test_references_are_cached_on_disk(runner, monkeypatch):
    ref = runner.reference()
    assert len(ref.curves) == 3 and all(len(c) == BUDGET.steps for c in ref.curves)
    files = list(runner.work_dir.glob("reference_*_bs32_none_30_seeds1-2-3.json"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["curves"] == ref.curves
    # A fresh process's cache (nothing in memory) reads the file and trains nothing.
    fresh = References(runner.problem, runner.work_dir)

    def train(*args):
        raise AssertionError("trained the FP32 references again")

    monkeypatch.setattr(fresh, "_run", train)
    assert fresh.get(runner.problem.baseline(), BUDGET).curves == ref.curves


def test_model_info_is_written(runner):
    info = json.loads((runner.work_dir / "model_info.json").read_text())
    assert [layer["id"] for layer in info["layers"]] == ["hidden", "hidden2", "logits"]
    assert info["output_layers"] == ["logits"]
    assert info["batch_size"] == 32 and info["train_examples"] == 1024
    assert info["layers"][0]["params"] == 16 * 64 + 64


@pytest.mark.slow
def test_nan_after_step_3_is_infeasible_with_the_step():
    runner = Runner(load_model_file(MODELS / "nan_after_3.py"), budget=BUDGET)
    with pytest.warns(UserWarning, match="FP32 reference run .* non-finite"):
        result = runner.try_policy(Policy())
    assert result.status == "infeasible"
    assert result.numerics["nonfinite_step"] == 4
    assert "step 4" in result.reason
    assert len(result.curve["loss"]) == 4


@pytest.mark.slow
def test_float16_slowdown_is_stopped_by_the_watchdog():
    runner = Runner(load_model_file(MODELS / "slow_float16.py"), budget=BUDGET)
    result = runner.try_policy(Policy(default="mixed_float16"))
    assert result.status == "too_slow", result.reason
    assert "slower than FP32" in result.reason
    assert result.numerics["watchdog_slowdown"] > BUDGET.watchdog
    assert len(result.curve["loss"]) == 2  # traced, then one step: stopped there
    # Stopped before any block was timed or the budget trained.
    assert result.step_times == {} and not {"measured", "train"} & set(result.timings)


def test_unnamed_layers_keep_their_ids_from_build_to_build(tmp_path):
    """Keras numbers unnamed layers per process; a per-layer policy written from
    model_info.json must still match the models built later (MobileNetV2's head is one)."""
    import keras

    from precsearch.model_file import spec_from_callables

    def build():
        return tiny_model(
            keras.layers.Dense(16), keras.layers.Dense(2), compiled=False, name="unnamed"
        )

    data = sign_data(256)
    compile_kwargs = {
        "optimizer": keras.optimizers.Adam(1e-2),
        "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    }
    runner = Runner(
        spec_from_callables(build, data, compile_kwargs=compile_kwargs),
        work_dir=tmp_path,
        # Enough for the loss to fall (judged); a bfloat16 layer may be slower than FP32
        # on this CPU, which this test of layer ids does not care about.
        budget=Budget(steps=20, warmup=1, block=2, stop_slow=False),
    )
    hidden = next(layer["id"] for layer in runner.info.layers if not layer["output"])
    assert hidden == "dense"
    keras.layers.Dense(3)  # the process's counter moves on, as in a long-lived worker
    for _ in range(2):
        result = runner.try_policy(Policy(layers={hidden: "mixed_bfloat16"}))
        assert result.status == "ok", result.reason
