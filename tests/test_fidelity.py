"""Judging a trial against FP32 (engine/fidelity.py), on scripted curves (no TensorFlow)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from precsearch.engine.fidelity import (
    assess,
    better_note,
    crossing,
    fidelity_gap,
    higher_is_better,
    judge,
    judging_note,
    smoothed,
    time_to_quality,
    window_mean,
)
from precsearch.engine.quality_test import stated_rates
from precsearch.engine.references import candidate_runs, candidate_seeds
from precsearch.policy import Policy
from precsearch.records import Budget, Fidelity, Reference, StepStats, TrialResult

SAMPLES = [32 * (i + 1) for i in range(8)]


def reference(finals=(0.9, 1.0, 1.1), val_metric=(None, None, None), initial=None, **kw):
    """FP32 runs that start at 2.0 and end their last quarter at ``finals``."""
    return Reference(
        batch_size=32,
        lr_rule="none",
        steps=8,
        curves=[[2.0] * 6 + [f, f] for f in finals],
        val_loss=[None] * len(finals),
        val_metric=list(val_metric),
        seeds=list(range(1, len(finals) + 1)),
        initial=initial or {},
        **{"metric_name": "accuracy", **kw},
    )


def result(final, metric=None, metric_name="accuracy", **numerics):
    r = TrialResult(
        policy={}, curve={"batch_size": 32, "samples": SAMPLES, "loss": [2.0] * 6 + [final] * 2}
    )
    r.numerics = {"nonfinite_step": None, **numerics}
    if metric is not None:
        r.val = {"metric": metric, "metric_name": metric_name}
    return r


def unit(sd, n=3, k=1, alpha=0.05, m=1):
    """The test's bar the module doc defines for one candidate run against 3 FP32 runs, by
    default: 4 labelings, too few for a permutation test at 5%, so the t quantile."""
    return scipy_stats.t.ppf(1 - alpha / k, n - 1) * sd * math.sqrt(1 / m + 1 / n)


def test_the_smoothed_loss_is_the_last_quarter_of_the_samples():
    assert window_mean(SAMPLES, [9, 9, 9, 9, 9, 9, 1, 3], 256) == 2
    # At equal samples: a curve four times coarser has one point in that quarter.
    assert window_mean([128, 256], [5, 2], 256) == 2
    assert window_mean(SAMPLES, [9] * 6 + [1, 3], 192) == 9  # points past 192 do not count
    assert math.isnan(window_mean([], [], 256))
    assert window_mean(SAMPLES, [9] * 7 + [math.nan], 256) == math.inf


def test_the_gap_is_one_sided_in_units_of_one_more_fp32_run():
    ref = reference()  # finals 0.9, 1.0, 1.1: sd 0.1
    u = unit(0.1)
    gap, gaps = fidelity_gap(result(1.0 + u), ref, Fidelity())
    assert gap == pytest.approx(1.0) and gaps == {"loss": pytest.approx(1.0)}
    assert judge(result(1.0 + 1.01 * u), ref, Fidelity())[0] == "infeasible"
    assert judge(result(1.0 + 0.99 * u), ref, Fidelity())[0] == "ok"


def test_training_better_than_fp32_is_feasible_and_said():
    status, reason, gap, gaps = judge(result(0.4), reference(), Fidelity())
    assert status == "ok" and reason == "" and gap < -1
    assert better_note(gaps).startswith("trains better than FP32: training loss")


def test_the_floor_is_a_share_of_what_fp32_learned_not_of_the_loss_level():
    # Seeds agree exactly: the unit is 2% of how far FP32 fell (2.0 -> 1.0), 0.02.
    tight = reference(finals=(1.0, 1.0, 1.0))
    assert fidelity_gap(result(1.01), tight, Fidelity())[0] == pytest.approx(0.5)
    # The same fall from a level ten times higher gives the same unit.
    high = Reference(
        batch_size=32, lr_rule="none", steps=8, curves=[[11.0] * 6 + [10.0] * 2] * 3,
        val_loss=[None] * 3, val_metric=[None] * 3,
    )  # fmt: skip
    worse = result(10.01)
    worse.curve["loss"] = [11.0] * 6 + [10.01] * 2
    assert fidelity_gap(worse, high, Fidelity())[0] == pytest.approx(0.5)


def test_a_validation_figure_at_chance_cannot_judge_and_is_left_out():
    # FP32's validation accuracy does not move from its 0.0982 at initialisation.
    ref = reference(val_metric=(0.0982, 0.0982, 0.0982), initial={"metric": 0.0982})
    assessment = assess(ref)
    assert assessment["loss"] == "" and "does not move" in assessment["val_metric"]
    note = judging_note(assessment, ref.steps)
    assert "validation accuracy does not move over 8 steps" in note
    assert "judged on training loss only" in note
    # 0.5 points better at chance, and a training loss like FP32's: feasible.
    status, _, _, gaps = judge(result(1.0, metric=0.1033), ref, Fidelity())
    assert status == "ok" and set(gaps) == {"loss"}


def test_a_validation_accuracy_that_falls_as_fp32_trains_cannot_judge():
    # CI's MobileNetV3Small at 10 steps on 297 validation digits: FP32 predicts one class
    # at a time, and its accuracy falls from 36/297 to 31, 30, 31 of 297, beyond the noise
    # but the wrong way. FP32 itself (seed 0, 27/297) was called 1.28 units worse on it.
    ref = reference(val_metric=(31 / 297, 30 / 297, 31 / 297), initial={"metric": 36 / 297})
    assessment = assess(ref)
    assert "validation accuracy gets worse over 8 steps" in assessment["val_metric"]
    status, _, _, gaps = judge(result(1.0, metric=27 / 297), ref, Fidelity())
    assert status == "ok" and set(gaps) == {"loss"}
    # The same fall in a loss is learning; the same rise in an accuracy is too.
    assert assess(reference(val_metric=(41 / 297, 42 / 297, 41 / 297),
                            initial={"metric": 36 / 297}))["val_metric"] == ""  # fmt: skip


def test_a_saturated_training_loss_cannot_judge():
    ref = reference(finals=(0.0, 0.00001, 0.0))
    assert "saturates" in assess(ref)["loss"]
    # Nothing else judges: the gap is not a number a tolerance could pass.
    assert fidelity_gap(result(0.5), ref, Fidelity())[0] == math.inf


def test_a_metric_judges_in_its_own_direction_with_a_half_point_floor():
    ref = reference(val_metric=(0.90, 0.90, 0.90), initial={"metric": 0.10})
    # Accuracy: worse is lower. Two figures judge, each at alpha / 2.
    assert judge(result(1.0, metric=0.894), ref, Fidelity())[0] == "infeasible"
    assert judge(result(1.0, metric=0.896), ref, Fidelity())[0] == "ok"
    assert judge(result(1.0, metric=0.95), ref, Fidelity())[0] == "ok"
    mae = reference(val_metric=(0.30, 0.30, 0.30), initial={"metric": 0.9}, metric_name="mae")
    assert not higher_is_better("mae") and higher_is_better("accuracy")
    assert judge(result(1.0, metric=0.25, metric_name="mae"), mae, Fidelity())[0] == "ok"
    status, reason, _, _ = judge(result(1.0, metric=0.40, metric_name="mae"), mae, Fidelity())
    assert status == "infeasible" and "validation mae" in reason


def test_numerics_make_infeasible():
    ref = reference()
    assert "step 5" in judge(result(1.0, nonfinite_step=5), ref, Fidelity())[1]
    assert "collapsed" in judge(result(1.0, min_loss_scale=0.5), ref, Fidelity())[1]
    assert "skipped" in judge(result(1.0, skipped_share=0.5), ref, Fidelity())[1]


def test_a_bigger_batch_that_learns_worse_per_sample_is_infeasible_with_that_reason():
    big = TrialResult(
        policy={}, curve={"batch_size": 128, "samples": [128, 256], "loss": [2.0, 1.5]}
    )
    big.numerics = {"nonfinite_step": None}
    status, reason, gap, _ = judge(big, reference(), Fidelity())
    assert status == "infeasible" and gap == pytest.approx(0.5 / unit(0.1))
    assert "trains worse than FP32 at batch 128 (yours 32)" in reason
    assert "256 samples" in reason
    big.curve["loss"] = [2.0, 1.05]  # as good per sample as FP32: feasible
    assert judge(big, reference(), Fidelity())[0] == "ok"


SD, METRIC_SD = 0.05, 0.02  # FP32's seed-to-seed sd in the simulations: the noise unit
N_FP32 = Budget().ref_seeds  # the default --fp32-runs


def simulated_reference(rng, n=N_FP32, figures=1):
    """``n`` FP32 runs on normal noise: the training loss alone judges (``figures`` 1),
    or with the validation loss and accuracy (3), each FP32 moves far from initialisation."""
    val = figures == 3
    return Reference(
        batch_size=32,
        lr_rule="none",
        steps=8,
        curves=[[2.0] * 6 + [f, f] for f in 1.0 + rng.normal(0, SD, size=n)],
        val_loss=list(1.0 + rng.normal(0, SD, size=n)) if val else [None] * n,
        val_metric=list(0.8 + rng.normal(0, METRIC_SD, size=n)) if val else [None] * n,
        seeds=list(range(1, n + 1)),
        initial={"loss": 2.0, "metric": 0.1} if val else {},
        metric_name="accuracy",
    )


def judged(fp32, loss, val_loss=None, val_metric=None):
    """The real judge on FP32 runs ``fp32`` and a candidate whose runs (seed 0, then its
    own seeds) end at ``loss`` (and ``val_loss``, ``val_metric``)."""
    m = len(loss)
    val_loss = [None] * m if val_loss is None else val_loss
    val_metric = [None] * m if val_metric is None else val_metric
    trial = result(loss[0])
    trial.val = {"loss": val_loss[0], "metric": val_metric[0]}
    trial.numerics["runs"] = [{"seed": 100 + i, "loss": loss[i], "val_loss": val_loss[i],
                               "val_metric": val_metric[i], "nonfinite_step": None}
                              for i in range(1, m)]  # fmt: skip
    return judge(trial, fp32, Fidelity())[0] != "ok"


def called_worse(studies, shift, rng, n=N_FP32, m=None, candidates=1, rho=0.0, figures=1):
    """Per study: ``n`` FP32 runs and ``candidates`` candidates ``shift`` noise units
    worse on one figure (the training loss; with three figures, the validation loss), each
    on seed 0 and seeds of its own: ``m`` runs, or as many as the real rule sizes
    (:func:`candidate_runs`). A final training loss is FP32's mean plus a seed's effect
    (``rho`` of the variance, shared by every run on that data order) plus the run's own
    noise. Returns the studies x candidates verdicts (True: worse) and the runs judged."""
    seed_sd, run_sd = SD * math.sqrt(rho), SD * math.sqrt(1 - rho)
    out = np.zeros((studies, candidates), dtype=bool)
    for i in range(studies):
        fp32 = simulated_reference(rng, n, figures)
        runs = m or candidate_runs(fp32, Fidelity())
        seed0 = rng.normal(0, seed_sd)  # the draw seed 0 gives every candidate
        for j in range(candidates):
            own = rng.normal(0, seed_sd, size=runs - 1)
            loss = 1.0 + np.concatenate([[seed0], own]) + rng.normal(0, run_sd, size=runs)
            if figures == 1:
                out[i, j] = judged(fp32, loss + shift * SD)
                continue
            val_loss = 1.0 + shift * SD + rng.normal(0, SD, size=runs)
            metric = 0.8 + rng.normal(0, METRIC_SD, size=runs)
            out[i, j] = judged(fp32, loss, val_loss, metric)
    return out, runs


@pytest.mark.parametrize("figures", [1, 3])
def test_fp32_at_held_out_seeds_is_called_worse_at_most_alpha_of_the_time(figure, figures):
    studies = 1500
    worse = called_worse(studies, 0.0, np.random.default_rng(1), figures=figures)[0].sum()
    # One-sided binomial test: could the rate be alpha or less?
    p = scipy_stats.binomtest(int(worse), studies, 0.05, alternative="greater").pvalue
    figure(f"fidelity: FP32 at held-out seeds, {figures} figure(s), called worse in "
           f"{worse}/{studies} studies")  # fmt: skip
    assert p > 0.01 and worse / studies > 0.02  # at the level, not far under it


@pytest.mark.parametrize(("figures", "runs"), [(1, 3), (3, 4)])
def test_a_candidate_two_noise_units_worse_is_caught_at_least_80_percent(figure, figures, runs):
    studies = 1500
    verdicts, m = called_worse(studies, 2.0, np.random.default_rng(2), figures=figures)
    caught, stated = int(verdicts.sum()), stated_rates(N_FP32, m, figures, 0.05)
    figure(f"fidelity: 2-unit-worse on one of {figures} figure(s), {m} runs, caught in "
           f"{caught}/{studies}; stated {stated['power']:.3f}")  # fmt: skip
    assert m == runs and stated["power"] >= 0.80  # the rule sized the runs for it
    # The real judge has that power: the count agrees with it, and is not under 80%.
    assert scipy_stats.binomtest(caught, studies, stated["power"]).pvalue > 0.01
    assert scipy_stats.binomtest(caught, studies, 0.8, alternative="less").pvalue > 0.01
    # One candidate run has no such power against any number of FP32 runs: Phi(2 - 1.645),
    # 64% (simulated: POWER_DRAWS draws).
    assert stated_rates(100, 1, 1, 0.05)["power"] < 0.7


def test_the_candidates_runs_are_the_fewest_that_reach_80_percent_power():
    rng, fidelity = np.random.default_rng(4), Fidelity()
    alpha = fidelity.alpha
    assert candidate_runs(simulated_reference(rng, 12), fidelity) == 3
    assert candidate_runs(simulated_reference(rng, 12, figures=3), fidelity) == 4
    assert stated_rates(12, 3, 2, alpha)["power"] < 0.8 <= stated_rates(12, 4, 2, alpha)["power"]
    # Eight FP32 runs need five of the candidate's for three figures (77% with four).
    assert candidate_runs(simulated_reference(rng, 8, figures=3), fidelity) == 5
    assert stated_rates(8, 4, 3, alpha)["power"] < 0.8 <= stated_rates(8, 5, 3, alpha)["power"]
    # With 3 FP32 runs no number up to 8 reaches it: the fewest, the power stated lower.
    assert candidate_runs(simulated_reference(rng, 3), fidelity) == 3
    assert stated_rates(3, 8, 1, alpha)["power"] < 0.8
    # A looser tolerance needs more runs for the same power; a stricter one calls FP32
    # worse more often than alpha (simulated on normal noise: below the exact bar).
    loose = Fidelity(tolerance=1.5)
    assert candidate_runs(simulated_reference(rng, 12), loose) > 3
    assert stated_rates(12, 3, 1, alpha, 1.5)["false_rejection"] <= alpha
    assert stated_rates(12, 3, 1, alpha, 0.7)["false_rejection"] > 2 * alpha
    # Seeds of its own: runs - 1 of them, the same for the same policy, none a noise run's.
    policy = Policy(types={"Dense": "mixed_bfloat16"})
    seeds = candidate_seeds(policy, 4)
    assert seeds[0] == 0 and len(seeds) == 4 and min(seeds[1:]) > N_FP32
    assert seeds == candidate_seeds(policy, 4) and candidate_seeds(policy, 3) == seeds[:3]
    other = candidate_seeds(Policy(types={"Dense": "mixed_float16"}), 8)
    assert not set(other[1:]) & set(candidate_seeds(policy, 8)) and len(other) == 8
    assert len(candidate_seeds(policy, 20)) == 8  # never into the next block of seeds


def test_candidates_of_equal_quality_no_longer_fail_together_on_one_draw():
    # Ten candidates like FP32 per study; seed 0's data order is 90% of the variance.
    rng = np.random.default_rng(3)
    before = called_worse(400, 0.0, rng, n=3, m=1, candidates=10, rho=0.9)[0]
    now = called_worse(400, 0.0, rng, candidates=10, rho=0.9)[0]
    # Judged on seed 0 alone, whole studies rejected every candidate like FP32.
    assert before.all(axis=1).mean() >= 0.01 and now.all(axis=1).mean() == 0
    assert now.mean() <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / now.size)


def test_a_run_on_its_own_seed_that_goes_non_finite_is_infeasible():
    trial = result(1.0)
    trial.numerics["runs"] = [{"seed": 12345, "loss": None, "nonfinite_step": 4}]
    status, reason, gap, _ = judge(trial, reference(), Fidelity())
    assert status == "infeasible" and gap == math.inf and "seed 12345" in reason


def test_more_runs_at_the_same_mean_are_judged_by_the_permutation_test():
    one, three = result(1.0 + unit(0.1)), result(1.0 + unit(0.1))
    three.numerics["runs"] = [{"seed": 7, "loss": 1.0 + unit(0.1), "nonfinite_step": None}] * 2
    # One run against 3 has 4 labelings, too few for 5%: the t bar, at which it sits.
    assert fidelity_gap(one, reference(), Fidelity())[0] == pytest.approx(1.0)
    # Three have 20: the bar is the largest T of the 19 others (scipy's permutation
    # test: the second largest of all 20, the observed being the largest), times FP32's sd
    # and sqrt(1/3 + 1/3).
    fp32, candidate = [0.9, 1.0, 1.1], [1.0 + unit(0.1)] * 3

    def t_statistic(f, c, axis=-1):
        diff = np.mean(c, axis=axis) - np.mean(f, axis=axis)
        with np.errstate(divide="ignore"):  # the labeling with the three equal runs as FP32's
            return diff / (np.std(f, axis=axis, ddof=1) * math.sqrt(2 / 3))

    test = scipy_stats.permutation_test(
        (fp32, candidate), t_statistic, permutation_type="independent"
    )
    null = test.null_distribution
    bar = np.sort(null)[-2] * 0.1 * math.sqrt(2 / 3)
    assert fidelity_gap(three, reference(), Fidelity())[0] == pytest.approx(unit(0.1) / bar)
    assert unit(0.1) / bar > 1.5  # the same mean, more runs: further beyond the bar


def stats(samples_per_s):
    return StepStats(0.01, 0.01, 0.01, 0.01, 10, 32, samples_per_s)


def linear(start, per_point, n=8):
    return [start - per_point * i for i in range(n)]


def test_smoothed_curves_and_their_crossing_are_interpolated():
    curve = smoothed(SAMPLES, linear(2.0, 0.125), 64)
    assert math.isnan(curve[0]) and curve[1] == pytest.approx(1.9375)
    assert crossing(SAMPLES, curve, 1.5) == pytest.approx(64 + 32 * (1.9375 - 1.5) / 0.125)
    assert crossing(SAMPLES, curve, 0.0) is None


def fp32_crossings(ref, target):
    curves = [smoothed(ref.samples(), curve, ref.span() / 4) for curve in ref.curves]
    return [crossing(ref.samples(), curve, target) for curve in curves]


def test_time_to_quality_targets_the_loss_every_fp32_run_reached():
    # Three FP32 runs fall linearly, the slowest to the highest final loss: the target.
    ref = Reference(
        batch_size=32, lr_rule="none", steps=8, val_loss=[None] * 3, val_metric=[None] * 3,
        curves=[linear(2.0, 0.10), linear(2.0, 0.12), linear(2.0, 0.14)],
    )  # fmt: skip
    fast = TrialResult(policy={}, curve={"batch_size": 32, "samples": ref.samples()})
    fast.curve["loss"] = linear(2.0, 0.25)  # learns about twice as fast
    fast.fp32, fast.candidate = stats(1000.0), stats(1500.0)
    ttq = time_to_quality(fast, ref)
    assert ttq["target_loss"] == pytest.approx(window_mean(ref.samples(), ref.curves[0], 256))
    assert ttq["outcome"] == "reached" and ttq["samples"] < ttq["fp32_samples"] <= 256
    assert ttq["speedup"] == pytest.approx((ttq["fp32_samples"] / 1000) / (ttq["samples"] / 1500))
    # The candidate's crossing is one more draw of the FP32 runs' spread of crossings.
    assert ttq["speedup_low"] < ttq["speedup"] < ttq["speedup_high"]
    logs = np.log([ttq_fp32 for ttq_fp32 in fp32_crossings(ref, ttq["target_loss"])])
    half = scipy_stats.t.ppf(0.975, 2) * np.std(logs, ddof=1) * math.sqrt(1 + 1 / 3)
    assert ttq["speedup_high"] / ttq["speedup"] == pytest.approx(math.exp(half))
    slow = TrialResult(policy={}, curve={"batch_size": 32, "samples": ref.samples()})
    slow.curve["loss"] = linear(2.0, 0.02)  # never gets there
    slow.fp32, slow.candidate = stats(1000.0), stats(3000.0)
    ttq = time_to_quality(slow, ref)
    assert ttq["speedup"] is None and ttq["outcome"] == "not reached within 1.5x the budget"


def test_a_reference_with_a_broken_seed_judges_the_same_read_back_from_json():
    nan = math.nan
    # Seed 3 went non-finite at its last call, the trial at its seventh: JSON holds null.
    ref = reference()
    ref.curves[2][-1] = nan
    broken = result(1.0)
    broken.curve["loss"][6:] = [nan, nan]
    for trial in (result(1.02), broken):
        trial.fp32, trial.candidate = stats(1000.0), stats(1000.0)
        stored_ref = Reference.from_dict(json.loads(json.dumps(ref.to_dict(), allow_nan=False)))
        stored = TrialResult.from_dict(json.loads(trial.to_json()))
        assert fidelity_gap(stored, stored_ref, Fidelity()) == fidelity_gap(trial, ref, Fidelity())
        assert judge(stored, stored_ref, Fidelity()) == judge(trial, ref, Fidelity())
        assert time_to_quality(stored, stored_ref) == time_to_quality(trial, ref)
    # The two finite seeds (0.9, 1.0) measure the noise.
    u = unit(np.std([0.9, 1.0], ddof=1), n=2)
    assert fidelity_gap(result(1.02), ref, Fidelity())[0] == pytest.approx(0.07 / u)
    assert fidelity_gap(broken, ref, Fidelity())[0] == math.inf
