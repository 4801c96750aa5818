"""Reading a study's trials: one rule each for which is which (precsearch/stored.py,
and the notebook API's export that reads the study's own options)."""

from __future__ import annotations

import optuna
from helpers import MODELS

from precsearch.app import api
from precsearch.stored import best_feasible_low, fp32_trial, trained_own_policy
from precsearch.study.options import SearchOptions


def stored(state: str, constraints: dict | None = None, **attrs):
    return optuna.trial.create_trial(
        state=optuna.trial.TrialState[state],
        values=[1.0, 0.0] if state == "COMPLETE" else None,
        params={},
        distributions={},
        user_attrs=attrs,
        constraints=constraints,
    )


def study_of(*trials):
    study = optuna.create_study(directions=["maximize", "minimize"])
    for trial in trials:
        study.add_trial(trial)
    return study


def test_the_fp32_trial_is_a_completed_one_never_a_failed_one():
    died = stored("FAIL", baseline="fp32", reason="worker died")
    assert fp32_trial(study_of(died)) is None
    retried = stored("COMPLETE", baseline="fp32", result={"policy": {}})
    assert fp32_trial(study_of(died, retried)).number == 1
    global_recipe = stored("COMPLETE", baseline="global_bfloat16", result={"policy": {}})
    assert fp32_trial(study_of(global_recipe)) is None


def test_a_repeat_or_a_probe_answered_trial_did_not_run():
    assert trained_own_policy(stored("COMPLETE", result={}))
    assert not trained_own_policy(stored("COMPLETE", result={}, duplicate_of=0))
    assert not trained_own_policy(stored("COMPLETE", result={}, probe_rejected=True))
    assert not trained_own_policy(stored("FAIL"))


def test_the_bar_a_new_trial_must_reach_is_the_best_feasible_lower_bound():
    def timed(low: float, fidelity: float, **attrs):
        result = {"policy": {}, "block_ratios": {"low": low}}
        return stored("COMPLETE", {"fidelity": fidelity}, result=result, **attrs)

    assert best_feasible_low(study_of()) == 1.0
    assert best_feasible_low(study_of(timed(0.8, -1.0))) == 1.0  # never below FP32
    study = study_of(
        timed(1.3, -0.5),
        timed(1.9, 2.0),  # faster, but trains unlike FP32
        timed(1.8, -0.5, duplicate_of=0),  # a repeat measured nothing of its own
        timed(1.7, -0.5, probe_rejected=True),  # the probes' prediction, not a trial
    )
    assert best_feasible_low(study) == 1.3


def test_exporting_from_a_notebook_trains_with_the_studys_own_options(tmp_path, monkeypatch):
    options = SearchOptions(batch_size=64, strategy="mirrored", steps=7, dtypes="float32,bfloat16")
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_user_attr("options", options.shared())
    study.set_user_attr("model_file", str(MODELS / "mlp.py"))
    made = []

    class Exporter:
        def export(self, policy, names, target):
            return {"paths": [str(target / name) for name in names]}

        def close(self):
            made.append("closed")

    def make_executor(options, work_dir, model_path):
        made.append((options, model_path))
        return Exporter()

    monkeypatch.setattr(api, "make_executor", make_executor)
    result = api.SearchResult(study, tmp_path)
    paths = result._train_and_export(None, ["saved_model"], tmp_path / "out")
    assert paths == [str(tmp_path / "out" / "saved_model")]
    (used, model_path), closed = made
    assert (used.batch_size, used.strategy, used.steps) == (64, "mirrored", 7)
    assert model_path == MODELS / "mlp.py" and closed == "closed"
