"""Reading a study's trials: which is which, and what each ran and decided.

One rule each, for every reader (the objective, the confirmation, the results): the FP32
baseline trial, the global recipe's trial, the trials that measured a policy of their
own, a trial's policy, and whether it met its constraints. Only the storage's data is
read; nothing here imports Optuna, TensorFlow or pandas.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from precsearch.policy import Policy
from precsearch.records import Confirmation, TrialResult

__all__ = [
    "baseline_trial",
    "best_feasible_low",
    "confirmation_of",
    "finished",
    "fp32_result",
    "fp32_trial",
    "is_feasible",
    "is_repeat",
    "named_constraints",
    "ran",
    "ran_results",
    "set_constraints",
    "stored_policy",
]

# Optuna 5 stores each named constraint under "constraints:<name>"; optuna-dashboard
# (0.21) reads only the list Optuna 4 stored under "constraints" for its Pareto front.
_LISTED = "constraints"


def set_constraints(trial: Any, constraints: dict[str, float]) -> None:
    """Record a running trial's constraints by name, and as the list optuna-dashboard
    reads, so that its Pareto front is precsearch's feasible front."""
    for name, value in constraints.items():
        trial.set_constraint(name, value)
    if constraints:
        listed = [float(value) for value in constraints.values()]
        trial.storage.set_trial_system_attr(trial._trial_id, _LISTED, listed)


def named_constraints(trial: Any) -> dict[str, float]:
    """A trial's constraints by name (without the dashboard's list of the same values)."""
    prefix = f"{_LISTED}:"
    return {k[len(prefix) :]: v for k, v in trial.system_attrs.items() if k.startswith(prefix)}


def is_feasible(trial: Any) -> bool:
    """Whether a finished Optuna trial met every constraint (≤ 0) it was given."""
    constraints = trial.constraints or {}
    return bool(constraints) and all(value <= 0 for value in constraints.values())


def is_repeat(trial: Any) -> bool:
    """Whether a trial is a sampler's repeat of a policy measured already (stored with
    the earlier figures, not run again, not counted)."""
    return "duplicate_of" in trial.user_attrs


def ran(trial: Any) -> bool:
    """Whether a trial trained a policy of its own: it holds a result and is neither a
    sampler's repeat nor a policy the probes answered without a trial."""
    return (
        "result" in trial.user_attrs
        and not is_repeat(trial)
        and not trial.user_attrs.get("probe_rejected")
    )


def ran_results(trials: Iterable[Any]) -> list[TrialResult]:
    """The results of those of ``trials`` that ran (:func:`ran`): what their time went on."""
    return [TrialResult.from_dict(t.user_attrs["result"]) for t in trials if ran(t)]


def finished(study: Any) -> list[Any]:
    """The completed trials that measured a policy of their own (no repeats)."""
    return [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state.name == "COMPLETE" and "result" in t.user_attrs and not is_repeat(t)
    ]


def best_feasible_low(study: Any) -> float:
    """The speedup a new trial must be able to reach to matter: the highest lower bound
    (of its own timed blocks' 95% interval) among the feasible trials that ran, or 1
    (FP32) when none is above it."""
    lows = [
        (t.user_attrs["result"].get("block_ratios") or {}).get("low") or 1.0
        for t in finished(study)
        if ran(t) and is_feasible(t)
    ]
    return max([1.0, *lows])


def baseline_trial(study: Any, label: str) -> Any | None:
    """The trial enqueued as baseline ``label`` (``fp32``, ``global_bfloat16``; a label
    ending in ``_`` is a prefix: ``global_`` for the first global recipe).

    A trial whose worker died is retried and the retry carries the label, so there may
    be several: the first COMPLETE one with a result, else the first of any state (whose
    reason says what happened to it); ``None`` when there is none.
    """
    found = []
    for trial in study.get_trials(deepcopy=False):
        name = str(trial.user_attrs.get("baseline", ""))
        if name.startswith(label) if label.endswith("_") else name == label:
            found.append(trial)
    done = [t for t in found if t.state.name == "COMPLETE" and "result" in t.user_attrs]
    return (done or found or [None])[0]


def fp32_trial(study: Any) -> Any | None:
    """The FP32 baseline trial (the user's own training measured as a trial), once it
    completed; ``None`` before."""
    trial = baseline_trial(study, "fp32")
    return trial if trial is not None and trial.state.name == "COMPLETE" else None


def fp32_result(study: Any) -> TrialResult | None:
    """The FP32 baseline trial's result (``None`` before it completed)."""
    trial = fp32_trial(study)
    return TrialResult.from_dict(trial.user_attrs["result"]) if trial else None


def stored_policy(trial: Any) -> Policy:
    """The policy a trial ran, from its stored result."""
    return Policy.from_dict(trial.user_attrs["result"]["policy"])


def confirmation_of(study: Any) -> Confirmation | None:
    """A study's confirmation record (``None`` before its confirmation)."""
    return Confirmation.from_dict(study.user_attrs.get("confirmation"))
