"""The FP32 references and what a Runner keeps between trials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precsearch import Policy
from precsearch.engine.runner import Runner
from precsearch.model_file import load_model_file
from precsearch.records import Budget

MODELS = Path(__file__).parent / "models"
BUDGET = Budget(steps=12, warmup=1, block=4)


@pytest.fixture(scope="module")
def runner():
    return Runner(load_model_file(MODELS / "mlp.py"), budget=BUDGET)


def test_the_user_training_is_its_own_normal_form(runner):
    base = runner.problem.baseline()
    assert runner.problem.normalise(base) == base


def test_the_model_the_references_traced_is_the_one_trials_are_timed_against(runner, monkeypatch):
    built = []
    model_for = runner.problem.model_for

    def counting(policy, seed):
        built.append(policy)
        return model_for(policy, seed)

    monkeypatch.setattr(runner.problem, "model_for", counting)
    runner.reference()
    model, _ = runner.timing_model()
    # One FP32 model, built and traced once for the references, then kept for the timing.
    assert len(built) == 1
    assert runner.timing_model()[0] is model


def test_a_trial_with_its_own_budget_leaves_the_runner_budget_alone(runner):
    shorter = Budget(steps=8, warmup=1, block=4)
    result = runner.try_policy(Policy(), budget=shorter)
    assert result.status == "ok", result.reason
    assert runner.budget == BUDGET
    # The trial was judged at its own budget's samples, against references that long.
    assert result.numerics["evaluated_at"] == shorter.samples(32)
    assert runner.reference(budget=shorter).steps == shorter.steps
    assert runner.reference().steps == BUDGET.steps


def test_a_candidate_trains_its_fp32_twin_only_when_it_gets_to_be_judged(tmp_path):
    model = load_model_file(MODELS / "nan_in_bf16.py")
    runner = Runner(model, work_dir=tmp_path, budget=BUDGET)
    twins = lambda: sorted(p.name for p in tmp_path.glob("reference_*bs64*"))  # noqa: E731
    stopped = runner.try_policy(Policy(default="mixed_bfloat16", batch_size=64))
    assert stopped.status == "infeasible", stopped.reason  # non-finite at its first step
    assert twins() == [] and not stopped.twin
    judged = runner.try_policy(Policy(batch_size=64))
    assert judged.fidelity_gap is not None, judged.reason  # trained to the end, judged
    assert len(twins()) == 1 and judged.twin["status"]
    twin = json.loads((tmp_path / twins()[0]).read_text())
    assert judged.timings["reference"] >= twin["seconds"]  # the twin's training is counted


def test_an_fp32_candidate_is_its_own_twin_and_the_twin_of_later_candidates(tmp_path, monkeypatch):
    runner = Runner(load_model_file(MODELS / "mlp.py"), work_dir=tmp_path, budget=BUDGET)
    runner.reference()  # the user's training and the timing model, built before counting
    built = []
    model_for = runner.problem.model_for
    monkeypatch.setattr(
        runner.problem, "model_for", lambda p, seed: built.append(p) or model_for(p, seed)
    )
    fp32 = runner.try_policy(Policy(batch_size=64))
    assert fp32.fidelity_gap is not None, fp32.reason
    assert len(built) == 1  # the candidate alone: no second FP32 run at batch 64
    assert fp32.precision_gap == pytest.approx(0.0, abs=1e-9)  # precision alone: nothing
    (twin,) = tmp_path.glob("reference_*bs64*")
    kept = json.loads(twin.read_text())
    assert kept["curves"][0] == fp32.curve["loss"][: len(kept["curves"][0])]
    low = runner.try_policy(Policy(default="mixed_bfloat16", batch_size=64))
    assert low.precision_gap is not None and len(built) == 2  # reused, not trained again
