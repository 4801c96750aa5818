"""The search loop with a scripted executor: repeats are not trials, an exhausted space
stops the search (no TensorFlow)."""

from __future__ import annotations

import io

import optuna

from precsearch.plugins import create
from precsearch.records import Budget, SpaceOptions, TrialResult
from precsearch.study.optimize import make_objective, search_trials
from precsearch.study.options import SearchOptions
from precsearch.study.space import SearchSpace
from precsearch.testing import sample_model_info


class Executor:
    """Every policy trains like FP32 at a speedup set by its batch size."""

    def __init__(self) -> None:
        self.ran: list[dict] = []
        self.bars: list[float] = []

    def run_trial(self, policy, budget):
        self.ran.append(policy.to_dict())
        self.bars.append(budget.stop_below)
        speedup = policy.batch_size / 32
        return TrialResult(
            policy=policy.to_dict(), status="ok", speedup=speedup, fidelity_gap=0.1,
            block_ratios={"estimate": speedup, "low": 0.9 * speedup, "high": 1.1 * speedup},
        )  # fmt: skip


def search(dimensions: list[str], trials: int, seed: int = 0):
    info = sample_model_info()
    space = SearchSpace(info, SpaceOptions(dtypes=["float32", "bfloat16"]), dimensions)
    objectives = [create("objective", "speedup"), create("objective", "fidelity=1.0")]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        directions=["maximize", "minimize"], sampler=optuna.samplers.RandomSampler(seed=seed)
    )
    executor = Executor()
    objective = make_objective(space, executor, Budget(steps=20), objectives, seed)
    options = SearchOptions(trials=trials)
    notes = search_trials(study, objective, options, space, io.StringIO(), [])
    return study, executor, notes


def test_repeats_of_a_measured_policy_are_not_counted_as_trials():
    study, executor, notes = search(["layer_dtypes", "batch_size"], trials=6)
    ran = [t for t in study.trials if t.state.name != "WAITING"]  # an enqueued twin may wait
    fresh = [t for t in ran if "duplicate_of" not in t.user_attrs]
    assert len(fresh) == len(executor.ran) == 6 and not notes
    keys = [tuple(sorted(t.params.items())) for t in fresh]
    assert len(set(keys)) == 6  # every counted trial measured a policy of its own
    for repeat in (t for t in study.trials if "duplicate_of" in t.user_attrs):
        original = study.trials[repeat.user_attrs["duplicate_of"]]
        assert repeat.params == original.params and repeat.values == original.values


def test_an_exhausted_space_stops_the_search_with_a_note():
    study, executor, notes = search(["jit_compile"], trials=10)
    assert len(executor.ran) == 2  # XLA off and on: the whole space
    assert notes and "proposes only policies it measured already (the space holds 2)" in notes[0]
    assert all(t.state.name == "COMPLETE" for t in study.trials)


def test_fp32_at_a_feasible_trials_batch_size_is_enqueued_as_its_twin():
    study, _, _ = search(["layer_dtypes", "batch_size"], trials=8, seed=3)
    own = sample_model_info()["batch_size"]
    every = {tuple(sorted(t.params.items())): t for t in study.trials if t.params}
    waiting = [t for t in study.trials if t.state.name == "WAITING"]
    parents = 0
    for trial in study.trials:
        low = any(v != "float32" for k, v in trial.params.items() if k.startswith("dtype"))
        if trial.state.name != "COMPLETE" or not low or trial.params["batch_size"] == own:
            continue
        parents += 1
        twin = {k: "float32" if k.startswith("dtype") else v for k, v in trial.params.items()}
        # Measured (enqueued by this trial or an earlier one), or still waiting to run.
        assert tuple(sorted(twin.items())) in every or any(
            t.system_attrs.get("fixed_params") == twin for t in waiting
        )
    assert parents and any("twin_of" in t.user_attrs for t in study.trials)


def test_a_trial_must_be_able_to_reach_the_best_feasible_trial_so_far_or_it_stops():
    study, executor, _ = search(["batch_size"], trials=4, seed=1)
    ran = [
        t for t in study.trials if t.state.name == "COMPLETE" and "duplicate_of" not in t.user_attrs
    ]
    assert len(ran) == len(executor.bars) >= 3
    best_low = 1.0
    for trial, bar in zip(ran, executor.bars, strict=True):
        # The baselines are held to FP32; every other trial to the best so far.
        assert bar == (1.0 if "baseline" in trial.user_attrs else best_low)
        best_low = max(best_low, trial.user_attrs["result"]["block_ratios"]["low"])
    assert max(executor.bars) > 1  # some trial had a bar above FP32 to reach
