from __future__ import annotations

import math

import pytest

from precsearch.objectives import Fidelity, fidelity_gap, judge, smoothed_tail
from precsearch.records import Reference, TrialResult


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
    r = TrialResult(policy={}, curve={"samples": [], "loss": [2.0] * 6 + [final, final]})
    r.numerics = {"nonfinite_step": None, **numerics}
    if metric is not None:
        r.val = {"metric": metric, "metric_name": "accuracy"}
    return r


def test_smoothed_tail_is_last_quarter():
    assert smoothed_tail([9, 9, 9, 9, 9, 9, 1, 3]) == 2
    assert math.isnan(smoothed_tail([]))


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
