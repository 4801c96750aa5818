"""The confirmation's report and record, on scripted rounds (no TensorFlow)."""

from __future__ import annotations

import json
import math

import optuna
import pytest
from test_selection import SimulatedMachine, measured, wobble

from precsearch import Policy
from precsearch.errors import TrialFailed
from precsearch.records import Budget, Confirmation, Measurement, TrialResult
from precsearch.results.export import trials_frame
from precsearch.stats import ratio_figures
from precsearch.study.confirm import confirm
from precsearch.study.verdict import parts_of, report, simpler_configs

FP32 = Policy(batch_size=32)
BF16 = Policy(default="mixed_bfloat16", batch_size=32)
BIG_BF16 = Policy(default="mixed_bfloat16", batch_size=128, jit_compile=True)
BIG_FP32 = Policy(batch_size=128, jit_compile=True)


def fresh_rounds(seed: int, **speeds: float) -> Measurement:
    """Fresh rounds of FP32, its exact copy, and each label at ``speeds`` times FP32."""
    fp32 = wobble(100, seed=seed)
    scaled = {label: [x * speed for x in fp32] for label, speed in speeds.items()}
    return measured(fp32=fp32, null=list(fp32), **scaled)


def parts_speeds(winner: Policy, adds: dict[str, float]) -> dict[str, float]:
    """The true speeds of the winner (``best``) and of every simpler policy, each part
    kept adding ``adds[part]`` times."""

    def speed(policy: Policy) -> float:
        return math.prod(adds[part] for part in parts_of(policy, FP32))

    simpler = {label: speed(policy) for label, policy in simpler_configs(winner, FP32)}
    return {"best": speed(winner), **simpler}


def parts_rounds(seed: int, winner: Policy, adds: dict[str, float], **speeds: float):
    """Fresh rounds of FP32, its exact copy, the winner and every simpler policy
    (:func:`parts_speeds`) and each label of ``speeds``."""
    return fresh_rounds(seed, **parts_speeds(winner, adds), **speeds)


def test_the_report_says_what_each_part_adds_the_others_kept():
    adds = {"precision": 1.35, "batch": 1.2, "xla": 1.1}
    fresh = parts_rounds(6, BIG_BF16, adds, **{"global": 0.6})
    peers = {"global": {"status": "feasible", "reason": ""}}
    best, verdict = report(fresh, BIG_BF16, FP32, peers)
    assert best["answer"] == "winner" and best["repeated"] and not best["left_out"]
    assert best["speedup_vs_fp32"]["estimate"] == pytest.approx(1.782)
    assert {p: f["estimate"] for p, f in best["parts"].items()} == pytest.approx(adds)
    assert best["speedup_vs_global_mixed"]["estimate"] == pytest.approx(2.97)
    assert verdict.startswith(
        "bfloat16 at batch 128 with XLA: 1.78x (1.78-1.78) FP32 (what each part adds, the "
        "others kept: bfloat16 1.35x (1.35-1.35), batch 128 1.20x (1.20-1.20), XLA 1.10x"
    )
    assert peers["global"]["vs_fp32"]["estimate"] == pytest.approx(0.6)


def test_an_answer_whose_precision_costs_gives_way_to_its_fp32_twin():
    fresh = parts_rounds(7, BIG_BF16, {"precision": 0.79, "batch": 1.2, "xla": 1.2})
    best, verdict = report(fresh, BIG_BF16, FP32, {}, trains_like_fp32=lambda p: True)
    assert best["answer"] == "simpler" and Policy.from_dict(best["policy"]) == BIG_FP32
    assert best["speedup_vs_fp32"]["estimate"] == pytest.approx(1.44)
    assert list(best["left_out"]) == ["precision"] and set(best["parts"]) == {"batch", "xla"}
    assert verdict.startswith("FP32 at batch 128 with XLA: 1.44x")
    assert "bfloat16 costs 21% (0.79x (0.79-0.79)): left out" in verdict
    # Without a twin that trains like FP32, the measured winner stands, and says why.
    best, verdict = report(fresh, BIG_BF16, FP32, {}, trains_like_fp32=lambda p: False)
    assert best["answer"] == "winner"
    assert "bfloat16 stays although it adds only 0.79x" in verdict
    assert "without it the policy is not shown to train like FP32" in verdict


def test_an_xla_part_within_the_instruments_error_is_left_out():
    # bfloat16 with XLA, where XLA adds nothing: bfloat16 alone is the answer.
    winner = Policy(default="mixed_bfloat16", batch_size=32, jit_compile=True)
    fresh = noisy_copy_rounds(15, **parts_speeds(winner, {"precision": 1.5, "xla": 1.0}))
    asked: list[Policy] = []

    def trains_like_fp32(policy: Policy) -> bool:
        asked.append(policy)
        return True

    best, verdict = report(fresh, winner, FP32, {}, trains_like_fp32, spread=(0.0, 0))
    assert best["answer"] == "simpler" and Policy.from_dict(best["policy"]) == BF16
    assert asked == [BF16]  # only the simpler policy that would be the answer is asked
    assert verdict.startswith("bfloat16: 1.48x")  # over FP32 pooled with its 3% fast copy
    assert (
        "XLA adds 1.00x (1.00-1.00), not confidently above 1 (one-sided 95% lower bound" in verdict
    )


def test_a_batch_size_whose_simpler_policy_trains_worse_stays_and_says_why():
    winner = Policy(default="mixed_bfloat16", batch_size=128)
    fresh = parts_rounds(16, winner, {"precision": 1.4, "batch": 1.0})
    best, verdict = report(fresh, winner, FP32, {}, lambda p: p.batch_size != 32)
    assert best["answer"] == "winner" and set(best["parts"]) == {"precision", "batch"}
    assert "batch 128 stays although it adds only 1.00x" in verdict


def test_when_fp32_is_the_answer_it_reads_as_your_training_with_the_instrument_error():
    fp32 = wobble(100, seed=8)
    fresh = measured(fp32=fp32, null=[x * 1.01 for x in wobble(1, seed=9)])
    fresh.rates["null"] = [a * b for a, b in zip(fp32, fresh.rates["null"], strict=True)]
    peers = {"global": {"status": "infeasible", "reason": "non-finite loss at step 4"}}
    best, verdict = report(fresh, None, FP32, peers)
    # No ratio for FP32 over itself: the copy's 1.01x is the instrument's error, not the
    # answer's speed.
    assert best["answer"] == "fp32" and best["speedup_vs_fp32"] is None
    assert best["instrument_error"] == pytest.approx(1.01, abs=0.01)
    assert verdict.startswith("your FP32 training is the answer (instrument error ±")
    assert "0.90x" not in verdict and "global mixed recipe infeasible (non-finite" in verdict


def test_a_winner_that_does_not_repeat_on_fresh_rounds_leaves_fp32_the_answer():
    fresh = fresh_rounds(10, best=0.99)
    best, verdict = report(fresh, BF16, FP32, {})
    assert best["answer"] == "fp32" and best["repeated"] is False
    assert "did not repeat on fresh rounds" in verdict


def noisy_copy_rounds(seed: int, **speeds: float) -> Measurement:
    """Fresh rounds whose FP32 copy reads 3% faster than FP32 (as identical instances do
    on CPUs), each label at ``speeds`` times FP32 exactly."""
    fresh = fresh_rounds(seed, **speeds)
    copy = wobble(1.03, seed=seed + 100, sd=0.005)
    fresh.rates["null"] = [x * w for x, w in zip(fresh.rates["fp32"], copy, strict=True)]
    return fresh


def test_a_precision_part_within_the_spread_of_identical_instances_is_left_out():
    # bfloat16 adds 2% on top of batch 128 with XLA: real on these exact rounds, but less
    # than two identical FP32 models read apart (3%), so the simpler policy is the answer.
    adds = {"precision": 1.02, "batch": 1.2, "xla": 1.2}
    fresh = noisy_copy_rounds(12, **parts_speeds(BIG_BF16, adds))
    copy = ratio_figures(fresh.rates["null"], fresh.rates["fp32"])
    assert copy["estimate"] > 1.02  # the copy reads further off than bfloat16 adds
    # Identical instances read 3% apart: each instance's offset varies by about 2% (sd),
    # as the spread pooled over every pair of instances of both stages says.
    spread = (0.02**2, 20)
    best, verdict = report(fresh, BIG_BF16, FP32, {}, lambda p: True, spread=spread)
    assert best["answer"] == "simpler" and list(best["left_out"]) == ["precision"]
    assert "bfloat16 adds 1.02x (0.9" in verdict and "the spread of identical instances" in verdict
    assert verdict.startswith("FP32 at batch 128 with XLA: 1.42x") and ": left out" in verdict
    # The rounds' noise alone would keep it: the instances' spread is what decides.
    best, _ = report(fresh, BIG_BF16, FP32, {}, lambda p: True, spread=(0.0, 0))
    assert best["answer"] == "winner" and best["parts"]["precision"]["low"] > 1
    # A part well beyond the instrument's error stays.
    fresh = noisy_copy_rounds(12, **parts_speeds(BIG_BF16, {**adds, "precision": 1.3}))
    best, _ = report(fresh, BIG_BF16, FP32, {}, lambda p: True, spread=spread)
    assert best["answer"] == "winner"


def test_a_winner_within_the_instruments_error_on_fresh_rounds_leaves_fp32_the_answer():
    # FP32's two instances read 3% apart: that spread is in the winner's interval.
    fresh = noisy_copy_rounds(13, best=1.02)
    best, verdict = report(fresh, BF16, FP32, {})
    assert best["answer"] == "fp32" and best["repeated"] is False
    assert "did not repeat on fresh rounds of new instances (1.00x (" in verdict
    assert "one-sided 95% lower bound 0." in verdict and "not above 1" in verdict


class ScriptedExecutor:
    """Answers ``confirm`` with rates from fixed speeds and the peer trial with a fixed
    result."""

    def __init__(self, speeds: dict[str, float], peer: TrialResult) -> None:
        self.machine = SimulatedMachine(speeds, seed=0)
        self.peer = peer
        self.asked: list[list[tuple[str, Policy | None]]] = []
        self.trials: list[Policy] = []
        self.broken = False

    def confirm(self, configs, orders, block):
        if not self.asked or self.asked[-1] != configs:
            self.asked.append(configs)
        return self.machine.confirm(configs, orders, block)

    def run_trial(self, policy, budget, peer=None):
        if policy is not None:  # a simpler answer's quality, judged by a trial of its own
            self.trials.append(policy)
            if self.broken:
                raise TrialFailed("error: worker died", "scripted")
            return TrialResult(policy=policy.to_dict(), status="ok", fidelity_gap=0.1)
        assert peer == "graph_rewrite"
        return self.peer


def scripted_study(trials: list[dict]) -> optuna.Study:
    """A study whose trials carry the attrs a precsearch trial stores."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"])
    script = iter(trials)

    def objective(trial):
        spec = next(script)
        trial.suggest_int("n", trial.number, trial.number)
        for key in ("baseline", "reason", "status"):
            if key in spec:
                trial.set_user_attr(key, spec[key])
        trial.set_user_attr("result", {"policy": spec["policy"].to_dict()})
        trial.set_constraint("fidelity", -0.5 if spec["feasible"] else 1.0)
        return spec["values"]

    study.optimize(objective, n_trials=len(trials))
    return study


def test_confirm_chooses_then_reports_fresh_rounds_with_peers_judged():
    study = scripted_study(
        [
            {"baseline": "fp32", "policy": FP32, "values": (1.0, 0.2), "feasible": True},
            {
                "baseline": "global_bfloat16",
                "policy": BF16,
                "values": (0.0, math.inf),
                "feasible": False,
                "reason": "non-finite loss at step 4",
            },
            {"policy": BIG_BF16, "values": (1.8, 0.1), "feasible": True},
        ]
    )
    rewrite = TrialResult(policy=FP32.to_dict(), status="ok", fidelity_gap=0.3)
    adds = {"precision": 1.4, "batch": 1.2, "xla": 1.2}
    speeds = {"fp32": 1.0, "null": 1.0, "c0": 2.016, "graph_rewrite": 0.4,
              **parts_speeds(BIG_BF16, adds)}  # fmt: skip
    executor = ScriptedExecutor(speeds, rewrite)
    record = confirm(study, executor, Budget(steps=20), seconds=30, block=10, seed=3)
    selection, fresh = executor.asked
    # Each configuration as two instances built apart, new ones for the fresh rounds
    # (FP32's are its timing model and the copy; the graph rewrite has one).
    assert [label for label, _ in selection] == ["fp32", "null", "c0", "c0#2"]  # no global
    # The winner and every simpler policy between it and FP32 (some of its parts set back).
    simpler = [f"best_without_{x}" for x in ("precision", "batch", "precision_batch", "xla",
                                             "precision_xla", "batch_xla")]  # fmt: skip
    assert [label for label, _ in fresh] == [
        "fp32", "null", "best", "best#2", *(f"{x}{i}" for x in simpler for i in ("", "#2")),
        "graph_rewrite"]  # fmt: skip
    assert dict(fresh)["best_without_precision"] == BIG_FP32
    assert dict(fresh)["best_without_batch_xla"] == BF16 and dict(fresh)["graph_rewrite"] is None
    # The worker keeps one traced model per policy (its JSON, the instance tag in it):
    # every instance in either stage is one of its own, but FP32's timing model.
    built = [(label == "null", p.to_dict()) for label, p in selection + fresh if p]
    assert len({json.dumps(key, sort_keys=True) for key in built}) == len(built) - 1
    assert "#2" not in record.verdict and "c0#2" not in str(record.candidates)
    assert record.best_trial == 2 and not record.best_is_fp32 and record.seed == 3
    assert record.best_policy == BIG_BF16.to_dict()
    assert record.best["speedup_vs_fp32"]["estimate"] == pytest.approx(2.016, rel=0.05)
    assert record.best["answer"] == "winner" and not executor.trials
    # The instrument's error's instance part, pooled over every configuration's two
    # instances in both stages (2 in the selection, 8 in the fresh rounds): the machine
    # gives each instance an offset of 2% sd (one in ten 4% more).
    instances = record.best["instances"]
    assert instances["df"] == 10 and 0.5 < instances["sd_percent"] < 6
    assert f"an instance's own offset {instances['sd_percent']:.1f}% sd" in record.verdict
    assert record.candidates[0]["wins"] and record.candidates[0]["trial"] == 2
    assert record.peers["global"]["status"] == "infeasible"
    assert "vs_fp32" not in record.peers["global"]
    assert record.peers["graph_rewrite"]["vs_fp32"]["estimate"] == pytest.approx(0.4, rel=0.05)
    # trials.csv holds each candidate's figures from the selection rounds, no one else's.
    frame = trials_frame(study)
    confirmed = frame.dropna(subset=["confirmed_speedup_vs_fp32_estimate"])
    assert list(confirmed["number"]) == [2] and frame["best"].tolist() == [False, False, True]
    low, estimate, high = (confirmed[f"confirmed_speedup_vs_fp32_{x}"].item()
                           for x in ("low", "estimate", "high"))  # fmt: skip
    assert low <= estimate <= high
    # The raw rounds are kept: every figure can be recomputed from them.
    raw = Measurement.from_dict(record.measured["fresh"])
    assert len(raw.orders) == record.rounds["fresh"] == len(raw.rates["best"])
    assert Confirmation.from_dict(study.user_attrs["confirmation"]) == record
    # Where the confirmation's time went, phase by phase (the export's is added by run).
    assert set(record.seconds) == {"selection", "peers", "fresh"}
    assert all(s >= 0 for s in record.seconds.values())


def test_a_simpler_answer_is_judged_by_its_trial_or_by_a_trial_of_its_own():
    # XLA adds nothing to bfloat16 at batch 128: the answer is the winner without it.
    simpler = Policy(default="mixed_bfloat16", batch_size=128)
    adds = {"precision": 1.4, "batch": 1.3, "xla": 1.0}
    speeds = {"fp32": 1.0, "null": 1.0, "c0": 1.82, **parts_speeds(BIG_BF16, adds)}
    base = {"baseline": "fp32", "policy": FP32, "values": (1.0, 0.2), "feasible": True}
    winner = {"policy": BIG_BF16, "values": (1.8, 0.1), "feasible": True}
    rewrite = TrialResult(policy=FP32.to_dict(), status="ok")
    rewrite.numerics["rewrite_applied"] = False
    # No trial of the simpler policy: one is run now, on the trials' budget.
    executor = ScriptedExecutor(speeds, rewrite)
    record = confirm(scripted_study([base, winner]), executor, Budget(steps=20), seconds=30, seed=3)
    assert record.best["answer"] == "simpler" and list(record.best["left_out"]) == ["xla"]
    assert Policy.from_dict(record.best_policy) == simpler and executor.trials == [simpler]
    assert record.best["quality"] == {"trains_like_fp32": True, "by": "a trial of its own",
                                      "fidelity_gap": 0.1, "status": "ok"}  # fmt: skip
    assert record.best_trial == 1  # the winner's: the simpler policy has no trial
    assert "XLA adds 1.0" in record.verdict and "left out" in record.verdict
    # A trial of the study that ran that policy says instead, and is the answer's trial.
    measured_simpler = {"policy": simpler, "values": (1.7, 0.1), "feasible": True, "status": "ok"}
    study = scripted_study([base, winner, measured_simpler])
    executor = ScriptedExecutor(speeds, rewrite)
    record = confirm(study, executor, Budget(steps=20), seconds=30, seed=3)
    assert record.best["answer"] == "simpler" and not executor.trials
    assert record.best["quality"]["by"] == "trial 2" and record.best_trial == 2
    # A trial of its own that fails judges nothing: the part stays, and the verdict says
    # why; the winner repeated, so nothing reads as "did not repeat".
    executor = ScriptedExecutor(speeds, rewrite)
    executor.broken = True
    record = confirm(scripted_study([base, winner]), executor, Budget(steps=20), seconds=30, seed=3)
    assert record.best["answer"] == "winner" and executor.trials == [simpler]
    assert "XLA stays although it adds only 1.0" in record.verdict
    assert "not_repeated" not in record.best


def test_a_rewrite_tensorflow_did_not_apply_is_not_available_not_a_ratio():
    study = scripted_study(
        [{"baseline": "fp32", "policy": FP32, "values": (1.0, 0.2), "feasible": True}]
    )
    rewrite = TrialResult(policy=FP32.to_dict(), status="ok")
    rewrite.numerics["rewrite_applied"] = False
    executor = ScriptedExecutor({"fp32": 1.0, "null": 1.0}, rewrite)
    record = confirm(study, executor, Budget(steps=20), seconds=10, block=10)
    assert record.best_is_fp32 and record.peers["graph_rewrite"]["status"] == "not available"
    assert "TensorFlow's graph rewrite not available" in record.verdict


def test_a_selection_that_ended_undecided_says_so_rather_than_crowning_fp32():
    fresh = fresh_rounds(14)
    _, verdict = report(fresh, None, FP32, {}, undecided_after=60.0)
    assert verdict.startswith("your FP32 training stays the answer (instrument error ±")
    assert "the selection was undecided within 60 s of rounds; more --confirm-time" in verdict
    _, decided = report(fresh, None, FP32, {})
    assert "nothing confirmed faster" in decided and "undecided" not in decided
