"""The confirmation's report and record, on scripted rounds (no TensorFlow)."""

from __future__ import annotations

import json
import math

import optuna
import pytest
from test_selection import SimulatedMachine, measured, wobble

from precsearch import Policy
from precsearch.records import Budget, Confirmation, Measurement, TrialResult
from precsearch.stats import ratio_figures
from precsearch.study.confirm import confirm
from precsearch.study.verdict import report

FP32 = Policy(batch_size=32)
BF16 = Policy(default="mixed_bfloat16", batch_size=32)
BIG_BF16 = Policy(default="mixed_bfloat16", batch_size=128, jit_compile=True)
BIG_FP32 = Policy(batch_size=128, jit_compile=True)


def fresh_rounds(seed: int, **speeds: float) -> Measurement:
    """Fresh rounds of FP32, its exact copy, and each label at ``speeds`` times FP32."""
    fp32 = wobble(100, seed=seed)
    scaled = {label: [x * speed for x in fp32] for label, speed in speeds.items()}
    return measured(fp32=fp32, null=list(fp32), **scaled)


def test_the_report_splits_the_speedup_into_precision_and_batch_size_with_xla():
    fresh = fresh_rounds(6, best=1.62, best_fp32=1.2, **{"global": 0.6})
    peers = {"global": {"status": "feasible", "reason": ""}}
    best, verdict = report(fresh, BIG_BF16, FP32, peers)
    assert best["answer"] == "winner" and best["repeated"]
    assert best["speedup_vs_fp32"]["estimate"] == pytest.approx(1.62)
    assert best["precision"]["estimate"] == pytest.approx(1.35)
    assert best["config"]["estimate"] == pytest.approx(1.2)
    assert best["speedup_vs_global_mixed"]["estimate"] == pytest.approx(2.7)
    assert "1.62x (1.62-1.62) FP32 = 1.35x from bfloat16 x 1.20x from batch 128 with XLA" in (
        verdict
    )
    assert peers["global"]["vs_fp32"]["estimate"] == pytest.approx(0.6)


def test_an_answer_whose_precision_costs_gives_way_to_its_fp32_twin():
    fresh = fresh_rounds(7, best=1.14, best_fp32=1.44)
    best, verdict = report(fresh, BIG_BF16, FP32, {}, twin_feasible=True)
    assert best["answer"] == "twin"
    assert best["speedup_vs_fp32"]["estimate"] == pytest.approx(1.44)
    assert verdict.startswith("FP32 at batch 128 with XLA: 1.44x")
    assert "bfloat16 there costs 21%" in verdict
    # Without a twin that trains like FP32, the measured winner stands.
    best, _ = report(fresh, BIG_BF16, FP32, {}, twin_feasible=False)
    assert best["answer"] == "winner"


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


def test_a_precision_part_within_the_instruments_error_is_left_out_for_the_fp32_twin():
    # bfloat16 adds 2% on top of batch 128 with XLA: real on these exact rounds, but less
    # than two identical FP32 models read apart, so the simpler policy is the answer.
    fresh = noisy_copy_rounds(12, best=1.44 * 1.02, best_fp32=1.44)
    copy = ratio_figures(fresh.rates["null"], fresh.rates["fp32"])
    assert copy["estimate"] > 1.02  # the copy reads further off than bfloat16 adds
    # The rounds' noise alone (no between-instance spread): the margin leaves it out.
    best, verdict = report(fresh, BIG_BF16, FP32, {}, twin_feasible=True, spread=(0.0, 0))
    assert best["answer"] == "twin" and best["precision"]["low"] > 1
    assert "bfloat16 there adds 1.02x (1.02-1.02), not confidently beyond the 1.03x" in verdict
    # 1.42x: against FP32's two instances pooled, the copy reading 3% fast.
    assert verdict.startswith("FP32 at batch 128 with XLA: 1.42x") and ": left out" in verdict
    # A part well beyond the instrument's error stays.
    fresh = noisy_copy_rounds(12, best=1.44 * 1.3, best_fp32=1.44)
    best, _ = report(fresh, BIG_BF16, FP32, {}, twin_feasible=True, spread=(0.0, 0))
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

    def confirm(self, configs, orders, block):
        if not self.asked or self.asked[-1] != configs:
            self.asked.append(configs)
        return self.machine.confirm(configs, orders, block)

    def run_trial(self, policy, budget, peer=None):
        assert policy is None and peer == "graph_rewrite"
        return self.peer


def scripted_study(trials: list[dict]) -> optuna.Study:
    """A study whose trials carry the attrs a precsearch trial stores."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"])
    script = iter(trials)

    def objective(trial):
        spec = next(script)
        trial.suggest_int("n", trial.number, trial.number)
        for key in ("baseline", "reason"):
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
    speeds = {"fp32": 1.0, "null": 1.0, "c0": 1.7, "best": 1.7, "best_fp32": 1.2,
              "graph_rewrite": 0.4}  # fmt: skip
    executor = ScriptedExecutor(speeds, rewrite)
    record = confirm(study, executor, Budget(steps=20), seconds=30, block=10, seed=3)
    selection, fresh = executor.asked
    # Each configuration as two instances built apart, new ones for the fresh rounds
    # (FP32's are its timing model and the copy; the graph rewrite has one).
    assert [label for label, _ in selection] == ["fp32", "null", "c0", "c0#2"]  # no global
    assert [label for label, _ in fresh] == [
        "fp32", "null", "best", "best#2", "best_fp32", "best_fp32#2", "graph_rewrite"]  # fmt: skip
    assert dict(fresh)["best_fp32"] == BIG_FP32 and dict(fresh)["graph_rewrite"] is None
    # The worker keeps one traced model per policy (its JSON, the instance tag in it):
    # every instance in either stage is one of its own, but FP32's timing model.
    built = [(label == "null", p.to_dict()) for label, p in selection + fresh if p]
    assert len({json.dumps(key, sort_keys=True) for key in built}) == len(built) - 1
    assert "#2" not in record.verdict and "c0#2" not in str(record.candidates)
    assert record.best_trial == 2 and not record.best_is_fp32 and record.seed == 3
    assert record.best_policy == BIG_BF16.to_dict()
    assert record.best["speedup_vs_fp32"]["estimate"] == pytest.approx(1.7, rel=0.05)
    assert record.candidates[0]["wins"] and record.candidates[0]["trial"] == 2
    assert record.peers["global"]["status"] == "infeasible"
    assert "vs_fp32" not in record.peers["global"]
    assert record.peers["graph_rewrite"]["vs_fp32"]["estimate"] == pytest.approx(0.4, rel=0.05)
    # The raw rounds are kept: every figure can be recomputed from them.
    raw = Measurement.from_dict(record.measured["fresh"])
    assert len(raw.orders) == record.rounds["fresh"] == len(raw.rates["best"])
    assert Confirmation.from_dict(study.user_attrs["confirmation"]) == record
    # Where the confirmation's time went, phase by phase (the export's is added by run).
    assert set(record.seconds) == {"selection", "peers", "fresh"}
    assert all(s >= 0 for s in record.seconds.values())


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
