"""The built-in objectives: what Optuna is told for each kind of trial."""

from __future__ import annotations

import math

import pytest

from precsearch.builtins.objectives import FidelityGap, Speedup
from precsearch.errors import UserInputError
from precsearch.records import TrialResult


def trial(status="ok", speedup=1.5, gap=0.3, **numerics):
    result = TrialResult(policy={}, status=status, speedup=speedup, fidelity_gap=gap)
    result.numerics = {"nonfinite_step": None, **numerics}
    return result


def test_speedup_scores_the_measured_ratio_or_the_watchdogs_estimate():
    assert Speedup().value(trial(), None) == 1.5
    too_slow = trial("too_slow", speedup=None, watchdog_slowdown=4.0)
    assert Speedup().value(too_slow, None) == 0.25
    assert Speedup().value(trial("failed", speedup=None), None) == 0.0


def test_the_fidelity_constraint_is_feasibility():
    objective = FidelityGap("1.0")
    assert objective.constraint(trial(gap=0.3), None) == pytest.approx(-0.7)
    # Training better than FP32 is a negative gap: feasible, and kept as measured.
    assert objective.value(trial(gap=-2.5), None) == -2.5
    assert objective.constraint(trial(gap=-2.5), None) < 0
    infeasible = trial("infeasible", gap=1.8)
    assert objective.constraint(infeasible, None) > 0
    # No gap (diverged, or stopped as too slow before it was judged): Optuna gets inf,
    # which its plots leave out, and a finite constraint (JSON has no infinity).
    nan = trial("infeasible", gap=None, nonfinite_step=3)
    assert math.isinf(objective.value(nan, None)) and objective.constraint(nan, None) == 1.0
    slow = trial("too_slow", speedup=None, gap=None)
    assert math.isinf(objective.value(slow, None)) and objective.constraint(slow, None) == 1.0
    assert objective.constraint(trial("infeasible", gap=3.5), None) == pytest.approx(3.5)


def test_a_tolerance_that_is_not_a_positive_number_is_bad_input():
    with pytest.raises(UserInputError, match="expected a positive tolerance"):
        FidelityGap("0")
    with pytest.raises(UserInputError, match="expected a tolerance number"):
        FidelityGap("tight")
