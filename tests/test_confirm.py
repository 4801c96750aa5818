"""The confirmation's decision and report, on scripted measurements (no TensorFlow)."""

from __future__ import annotations

import optuna
import pytest

from precsearch import Policy
from precsearch.records import Budget, Confirmation, Measurement, TrialResult
from precsearch.study.confirm import choose, confirm, report

FP32 = Policy(batch_size=32)
BF16 = Policy(default="mixed_bfloat16", batch_size=32)
BIG_BF16 = Policy(default="mixed_bfloat16", batch_size=128, jit_compile=True)
BIG_FP32 = Policy(batch_size=128, jit_compile=True)


def measured(**rates: list[float]) -> Measurement:
    return Measurement(rates=rates)


def test_a_candidate_inside_the_copys_noise_is_not_called_faster():
    # The candidate's median (1.08) beats FP32, but a copy of FP32 reached 1.12 by chance.
    m = measured(
        fp32=[100, 100, 100, 100, 100],
        null=[95, 112, 101, 99, 104],
        c0=[108, 104, 110, 108, 109],
    )
    winner, bar, candidates = choose(m, [7])
    assert winner is None and bar == pytest.approx(1.12)
    assert candidates[0]["speedup_vs_fp32"]["median"] == pytest.approx(1.08)


def test_the_fastest_candidate_above_every_round_of_the_copy_wins():
    m = measured(
        fp32=[100] * 5, null=[98, 103, 101, 99, 100], c0=[150, 140, 160, 150, 155], c1=[120] * 5
    )
    winner, bar, _ = choose(m, [3, 5])
    assert winner == 3 and bar == pytest.approx(1.03)


def test_the_report_splits_the_speedup_into_precision_and_batch_size_with_xla():
    fresh = measured(
        fp32=[100] * 3,
        null=[99, 100, 101],
        best=[162] * 3,
        best_fp32=[120] * 3,
        **{"global": [60] * 3},
    )
    peers = {"global": {"status": "feasible", "reason": ""}}
    best, verdict = report(fresh, BIG_BF16, FP32, peers, ttq_samples=0.8)
    assert best["speedup_vs_fp32"]["median"] == pytest.approx(1.62)
    assert best["precision"]["median"] == pytest.approx(1.35)
    assert best["config"]["median"] == pytest.approx(1.2)
    assert best["speedup_vs_global_mixed"]["median"] == pytest.approx(2.7)
    assert best["time_to_quality"] == pytest.approx(1.62 * 0.8)
    assert "1.62x FP32 (1.62-1.62) = 1.35x from bfloat16 x 1.20x from batch 128 with XLA" in verdict
    assert peers["global"]["vs_fp32"]["median"] == pytest.approx(0.6)


def test_when_fp32_is_the_answer_its_figures_are_the_measured_copy_not_ones():
    fresh = measured(fp32=[100] * 3, null=[97, 100, 104])
    peers = {"global": {"status": "infeasible", "reason": "non-finite loss at step 4"}}
    best, verdict = report(fresh, None, FP32, peers, None)
    assert best["speedup_vs_fp32"] == {"median": 1.0, "min": 0.97, "max": 1.04, "rounds": 3}
    assert "FP32 as you train it is the answer" in verdict
    assert "global mixed recipe infeasible (non-finite loss at step 4)" in verdict


class ScriptedExecutor:
    """Answers ``confirm`` with fixed rates and the peer trial with a fixed result."""

    def __init__(self, rates: dict[str, list[float]], peer: TrialResult) -> None:
        self.rates, self.peer = rates, peer
        self.asked: list[list[tuple[str, Policy | None]]] = []

    def confirm(self, configs, rounds, block):
        self.asked.append(configs)
        return Measurement(rates={label: self.rates[label] for label, _ in configs})

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
                "values": (0.0, 1000.0),
                "feasible": False,
                "reason": "non-finite loss at step 4",
            },
            {"policy": BIG_BF16, "values": (1.8, 0.1), "feasible": True},
        ]
    )
    rewrite = TrialResult(policy=FP32.to_dict(), status="ok", fidelity_gap=0.3)
    executor = ScriptedExecutor(
        {
            "fp32": [100] * 3,
            "null": [99, 100, 101],
            "c0": [170, 180, 190],
            "best": [160, 165, 170],
            "best_fp32": [120] * 3,
            "graph_rewrite": [40] * 3,
        },
        rewrite,
    )
    record = confirm(study, executor, Budget(steps=20), rounds=3, block=10)
    selection, fresh = executor.asked
    assert [label for label, _ in selection] == ["fp32", "null", "c0"]  # global: infeasible
    assert [label for label, _ in fresh] == ["fp32", "null", "best", "best_fp32", "graph_rewrite"]
    assert dict(fresh)["best_fp32"] == BIG_FP32 and dict(fresh)["graph_rewrite"] is None
    assert record.best_trial == 2 and not record.best_is_fp32
    # Reported from the fresh rounds, not the 1.80x it was chosen on.
    assert record.best["speedup_vs_fp32"]["median"] == pytest.approx(1.65)
    assert record.candidates[0]["speedup_vs_fp32"]["median"] == pytest.approx(1.8)
    assert record.peers["global"]["status"] == "infeasible"
    assert "vs_fp32" not in record.peers["global"]
    assert record.peers["graph_rewrite"]["vs_fp32"]["median"] == pytest.approx(0.4)
    assert Confirmation.from_dict(study.user_attrs["confirmation"]) == record


def test_a_rewrite_tensorflow_did_not_apply_is_not_available_not_a_ratio():
    study = scripted_study(
        [{"baseline": "fp32", "policy": FP32, "values": (1.0, 0.2), "feasible": True}]
    )
    rewrite = TrialResult(policy=FP32.to_dict(), status="ok")
    rewrite.numerics["rewrite_applied"] = False
    executor = ScriptedExecutor({"fp32": [100] * 3, "null": [100] * 3}, rewrite)
    record = confirm(study, executor, Budget(steps=20), rounds=3, block=10)
    assert record.best_is_fp32 and record.peers["graph_rewrite"]["status"] == "not available"
    assert "TensorFlow's graph rewrite not available" in record.verdict
