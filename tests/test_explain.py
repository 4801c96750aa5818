"""Why each layer group got its dtype: the fit over a study's trials recovers effects
it was built from, and says when the trials cannot separate one (no TensorFlow)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import optuna

from precsearch.results.explain import group_effects, why_lines

SPACE = {
    "dtype:Conv2D": ["float32", "bfloat16"],
    "dtype:Dense": ["float32", "bfloat16"],
    "batch_size": [32, 64],
}
# What bfloat16 multiplies the speed by in each group, and batch 64.
TRUTH = {"dtype:Conv2D": 0.5, "dtype:Dense": 1.3, "batch_size": 1.2}


def study_of(points: list[dict], noise: float, seed: int = 0, unlike=()) -> optuna.Study:
    """Trials at ``points``, each with the speedup the truth gives times lognormal noise;
    those whose index is in ``unlike`` trained unlike FP32."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_user_attr("space", {"params": {k: [str(v) for v in vs] for k, vs in SPACE.items()}})
    rng = np.random.default_rng(seed)
    for point in points:
        study.enqueue_trial(point)

    def objective(trial):
        params = {name: trial.suggest_categorical(name, values) for name, values in SPACE.items()}
        speed = math.exp(rng.normal(0, noise))
        speed *= TRUTH["dtype:Conv2D"] if params["dtype:Conv2D"] == "bfloat16" else 1
        speed *= TRUTH["dtype:Dense"] if params["dtype:Dense"] == "bfloat16" else 1
        speed *= TRUTH["batch_size"] if params["batch_size"] == 64 else 1
        bad = trial.number in unlike
        trial.set_user_attr("status", "infeasible" if bad else "ok")
        trial.set_user_attr("result", {"speedup": speed})
        trial.set_constraint("fidelity", 1.0 if bad else -0.5)
        return speed, 0.1

    study.optimize(objective, n_trials=len(points))
    return study


def grid() -> list[dict]:
    return [dict(zip(SPACE, values, strict=True)) for values in itertools.product(*SPACE.values())]


def test_the_fit_recovers_each_groups_effect_with_an_interval_that_covers_it():
    effects = {e["param"]: e for e in group_effects(study_of(grid() * 2, noise=0.05))}
    for param in ("dtype:Conv2D", "dtype:Dense"):
        effect = effects[param]["effect"]
        assert effect["low"] < TRUTH[param] < effect["high"]
        assert effect["high"] / effect["low"] < 1.2  # 16 trials at 5% noise: a tight figure
    lines = why_lines(list(effects.values()), {"dtype:Dense": "bfloat16"})
    assert lines[0].startswith("Conv2D: float32 — bfloat16 there 0.5")
    assert "costs speed" in lines[0]
    assert lines[1].startswith("Dense: bfloat16 — bfloat16 there 1.3") and "saves time" in lines[1]


def test_the_intervals_cover_the_truth_at_their_level():
    """Over many simulated studies of 12 random trials, each 95% interval covers the
    effect it estimates about 95% of the time."""
    rng = np.random.default_rng(1)
    covered = total = 0
    for seed in range(150):
        points = [grid()[i] for i in rng.integers(0, 8, size=12)]
        for e in group_effects(study_of(points, noise=0.1, seed=seed)):
            if e["effect"] is not None:
                total += 1
                covered += e["effect"]["low"] < TRUTH[e["param"]] < e["effect"]["high"]
    assert total > 250
    assert 0.91 < covered / total < 0.99


def test_what_the_trials_cannot_separate_is_said_not_guessed():
    # Conv2D and Dense always change together: neither effect is identifiable.
    together = [p for p in grid() if p["dtype:Conv2D"] == p["dtype:Dense"]]
    effects = group_effects(study_of(together * 2, noise=0.05))
    assert [e["effect"] for e in effects] == [None, None]
    assert effects[0]["why_not"] == "it always changed together with another choice"
    # A group no trial put in bfloat16.
    fp32_conv = [p for p in grid() if p["dtype:Conv2D"] == "float32"]
    effects = {e["param"]: e for e in group_effects(study_of(fp32_conv * 2, noise=0.05))}
    assert effects["dtype:Conv2D"]["why_not"] == "every timed trial had it in float32"
    dense = effects["dtype:Dense"]["effect"]
    assert dense["low"] < TRUTH["dtype:Dense"] < dense["high"]


def test_trials_that_trained_unlike_fp32_are_counted_beside_the_speed():
    points = grid()
    unlike = [i for i, p in enumerate(points) if p["dtype:Conv2D"] == "bfloat16"][:3]
    effects = group_effects(study_of(points, noise=0.05, unlike=unlike))
    (line,) = [x for x in why_lines(effects, {}) if x.startswith("Conv2D")]
    assert line.endswith("; 3 of 4 trials with it in bfloat16 trained unlike FP32")


def test_a_study_without_dtype_choices_explains_nothing():
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_user_attr("space", {"params": {"batch_size": ["32", "64"]}})
    assert group_effects(study) == []


def test_a_global_choice_is_named_every_layer():
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_user_attr("space", {"params": {"dtype": ["float32", "bfloat16"]}})
    assert group_effects(study)[0]["group"] == "every layer"
