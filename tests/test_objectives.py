from __future__ import annotations

import math

import pytest

from precsearch.engine.fidelity import Fidelity, fidelity_gap, judge, time_to_quality, window_mean
from precsearch.records import Reference, StepStats, TrialResult


def reference(finals=(1.0, 1.1, 0.9), val_metric=(None, None, None)):
    return Reference(
        batch_size=32,
        lr_rule="none",
        steps=8,
        curves=[[2.0] * 6 + [f, f] for f in finals],
        val_loss=[None] * 3,
        val_metric=list(val_metric),
    )


def result(final, metric=None, **numerics):
    samples = [32 * (i + 1) for i in range(8)]
    r = TrialResult(
        policy={}, curve={"batch_size": 32, "samples": samples, "loss": [2.0] * 6 + [final] * 2}
    )
    r.numerics = {"nonfinite_step": None, **numerics}
    if metric is not None:
        r.val = {"metric": metric, "metric_name": "accuracy"}
    return r


def test_the_smoothed_loss_is_the_last_quarter_of_the_samples():
    samples = [32 * (i + 1) for i in range(8)]
    assert window_mean(samples, [9, 9, 9, 9, 9, 9, 1, 3], 256) == 2
    # At equal samples: a curve four times coarser has one point in that quarter.
    assert window_mean([128, 256], [5, 2], 256) == 2
    assert window_mean(samples, [9] * 6 + [1, 3], 192) == 9  # points past 192 do not count
    assert math.isnan(window_mean([], [], 256))


def test_gap_in_band_units():
    # FP32 finals 0.9..1.1: mean 1.0, band 0.2.
    assert fidelity_gap(result(1.0), reference(), Fidelity()) == pytest.approx(0)
    assert fidelity_gap(result(1.1), reference(), Fidelity()) == pytest.approx(0.5)
    assert fidelity_gap(result(1.4), reference(), Fidelity()) == pytest.approx(2.0)
    assert judge(result(1.4), reference(), Fidelity())[0] == "infeasible"
    assert judge(result(1.15), reference(), Fidelity())[0] == "ok"


def test_relative_floor_when_seeds_agree():
    tight = reference(finals=(1.0, 1.0, 1.0))
    # Band 0 -> unit is 2% of 1.0.
    assert fidelity_gap(result(1.01), tight, Fidelity()) == pytest.approx(0.5)
    assert judge(result(1.01), tight, Fidelity())[0] == "ok"


def test_numerics_make_infeasible():
    ref = reference()
    assert "step 5" in judge(result(1.0, nonfinite_step=5), ref, Fidelity())[1]
    assert "collapsed" in judge(result(1.0, min_loss_scale=0.5), ref, Fidelity())[1]
    assert "skipped" in judge(result(1.0, skipped_share=0.5), ref, Fidelity())[1]


def test_metric_tolerance():
    ref = reference(val_metric=(0.90, 0.91, 0.92))
    assert judge(result(1.0, metric=0.85), ref, Fidelity(tolerance=100, metric_abs=0.02))[0] == (
        "infeasible"
    )
    assert judge(result(1.0, metric=0.90), ref, Fidelity(tolerance=100, metric_abs=0.02))[0] == (
        "ok"
    )


def test_a_bigger_batch_that_learns_worse_per_sample_is_infeasible_with_that_reason():
    big = TrialResult(
        policy={}, curve={"batch_size": 128, "samples": [128, 256], "loss": [2.0, 1.5]}
    )
    big.numerics = {"nonfinite_step": None}
    status, reason, gap = judge(big, reference(), Fidelity())
    assert status == "infeasible" and gap == pytest.approx(2.5)
    assert "learns worse per sample" in reason and "batch 128 (yours 32)" in reason
    assert "256 samples" in reason
    big.curve["loss"] = [2.0, 1.05]  # as good per sample as FP32: feasible
    assert judge(big, reference(), Fidelity())[0] == "ok"


def stats(samples_per_s):
    return StepStats(0.01, 0.01, 0.01, 0.01, 10, 32, samples_per_s)


def test_time_to_quality_counts_the_samples_to_fp32s_final_loss_and_their_time():
    # FP32 falls linearly from 2.0 to 1.0 over 256 samples; its final smoothed loss is
    # the mean of its last quarter, 1.0625.
    ref = Reference(
        batch_size=32, lr_rule="none", steps=8, val_loss=[None] * 3, val_metric=[None] * 3,
        curves=[[2.0 - i / 7 for i in range(8)]] * 3,
    )  # fmt: skip
    fast = TrialResult(policy={}, curve={"batch_size": 32, "samples": ref.samples()})
    fast.curve["loss"] = [2.0 - 2 * i / 7 for i in range(8)]  # learns twice as fast
    fast.fp32, fast.candidate = stats(1000.0), stats(1500.0)
    ttq = time_to_quality(fast, ref)
    assert ttq["fp32_samples"] == 256 and ttq["samples"] < 256
    assert ttq["speedup"] == pytest.approx((256 / 1000) / (ttq["samples"] / 1500))
    slow = TrialResult(policy={}, curve={"batch_size": 32, "samples": ref.samples()})
    slow.curve["loss"] = [2.0 - i / 14 for i in range(8)]  # never gets there
    slow.fp32, slow.candidate = stats(1000.0), stats(3000.0)
    assert time_to_quality(slow, ref)["speedup"] is None
