"""The confirmation's decision, on scripted measurements (no TensorFlow, no timing)."""

from __future__ import annotations

import optuna
import pytest

from precsearch import Policy
from precsearch.confirm import confirm, decide
from precsearch.records import Confirmation, Measurement

FP32 = Policy(batch_size=32)
BF16 = Policy(default="mixed_bfloat16", batch_size=32)
BIG = Policy(batch_size=128)


def measured(**rates: list[float]) -> Measurement:
    return Measurement(rates=rates)


def test_a_candidate_inside_the_copys_noise_is_not_called_faster():
    # The candidate's median (1.08) beats FP32, but a copy of FP32 reached 1.12 by chance.
    m = measured(
        fp32=[100, 100, 100, 100, 100],
        null=[95, 112, 101, 99, 104],
        c0=[108, 104, 110, 108, 109],
    )
    record = decide(m, [7], fp32_trial=0, global_trial=None, rounds=5, block=10)
    assert record.best_is_fp32 and record.best_trial == 0
    assert record.bar == pytest.approx(1.12)
    assert "not above the 1.12x a copy of FP32 reached" in record.verdict


def test_a_candidate_above_every_round_of_the_copy_wins_with_its_spread():
    m = measured(
        fp32=[100, 100, 100, 100, 100],
        null=[98, 103, 101, 99, 100],
        c0=[150, 140, 160, 150, 155],
        c1=[120, 120, 120, 120, 120],
        **{"global": [60, 60, 60, 60, 60]},
    )
    record = decide(m, [3, 5], fp32_trial=0, global_trial=1, rounds=5, block=10)
    assert not record.best_is_fp32 and record.best_trial == 3
    vs = record.best["speedup_vs_fp32"]
    assert (vs["median"], vs["min"], vs["max"], vs["rounds"]) == (1.5, 1.4, 1.6, 5)
    assert record.best["speedup_vs_global_mixed"]["median"] == pytest.approx(2.5)
    assert Confirmation.from_dict(record.to_dict()) == record


class ScriptedExecutor:
    """Answers ``confirm`` with fixed rates and remembers what it was asked to time."""

    def __init__(self, rates: dict[str, list[float]]) -> None:
        self.rates = rates
        self.asked: tuple[list[Policy], Policy | None] | None = None

    def confirm(self, candidates, global_policy, rounds, block):
        self.asked = (candidates, global_policy)
        labels = ["fp32", "null", *(["global"] if global_policy else [])]
        labels += [f"c{i}" for i in range(len(candidates))]
        return Measurement(rates={label: self.rates[label] for label in labels})


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


def test_a_nan_global_recipe_is_reported_infeasible_never_as_a_ratio():
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
            {"policy": BIG, "values": (1.8, 0.1), "feasible": True},
        ]
    )
    executor = ScriptedExecutor(
        {"fp32": [100] * 3, "null": [99, 100, 101], "c0": [170, 180, 190], "global": [1] * 3}
    )
    record = confirm(study, executor, rounds=3, block=10)
    candidates, global_policy = executor.asked
    assert global_policy is None and candidates == [BIG]
    assert record.global_vs_fp32 is None and record.best_trial == 2
    assert record.candidates[0]["speedup_vs_global_mixed"] is None
    assert record.global_reason == "infeasible (non-finite loss at step 4)"
    assert "global mixed recipe is infeasible (non-finite loss at step 4)" in record.verdict
    assert study.user_attrs["confirmation"]["global_reason"] == record.global_reason


def test_a_feasible_global_recipe_is_measured_and_confirmed_like_a_candidate():
    study = scripted_study(
        [
            {"baseline": "fp32", "policy": FP32, "values": (1.0, 0.2), "feasible": True},
            {"baseline": "global_bfloat16", "policy": BF16, "values": (1.3, 0.3), "feasible": True},
        ]
    )
    executor = ScriptedExecutor(
        {"fp32": [100] * 3, "null": [100] * 3, "global": [90] * 3, "c0": [90] * 3}
    )
    record = confirm(study, executor, rounds=3, block=10)
    assert executor.asked == ([BF16], BF16)
    assert record.best_is_fp32 and record.global_vs_fp32["median"] == pytest.approx(0.9)
    assert record.global_reason == ""
