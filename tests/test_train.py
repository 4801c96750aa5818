"""`precsearch train` and the learning rate a policy's batch size asks for."""

from __future__ import annotations

import pytest
from helpers import MODELS

from precsearch import Policy
from precsearch.engine.problem import Problem
from precsearch.engine.train import train
from precsearch.model_file import load_model_file


def test_train_scales_a_learning_rate_schedule(tmp_path):
    # Keras refuses to assign a number to an optimizer built with a schedule.
    policy = Policy(batch_size=128, base_batch_size=32, lr_rule="linear")
    path = policy.save(tmp_path / "policy.json")
    runs = train(str(MODELS / "scheduled.py"), str(path), steps=3, out=str(tmp_path / "run"))
    assert runs["policy"]["stopped"] == ""
    assert runs["policy"]["learning_rate"] == pytest.approx(4 * 1e-3)


@pytest.mark.parametrize(("rule", "factor"), [("linear", 4.0), ("sqrt", 2.0), ("none", 1.0)])
def test_a_schedule_follows_the_batch_size_in_the_search_too(rule, factor):
    problem = Problem(load_model_file(MODELS / "scheduled.py"))
    model = problem.model_for(Policy(batch_size=128, base_batch_size=32, lr_rule=rule), seed=0)
    schedule = model.optimizer._learning_rate
    assert float(schedule(0)) == pytest.approx(factor * 1e-3)
    assert float(schedule(100)) == pytest.approx(factor * 0.5e-3)  # still the user's decay
