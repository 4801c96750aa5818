"""What a study stores, and the one place that reads and writes it.

Every Optuna user attribute precsearch keeps (a trial's result, status, reason, which
baseline it is, whether it repeats or was answered by the probes; a study's model, space,
budget, probes, references, confirmation) is spelt here and nowhere else, and a stored
record comes back as its dataclass (a trial's :class:`~precsearch.records.TrialResult`
is parsed once). On top of those, one rule each for every reader (the objective, the
confirmation, the results): the FP32 baseline trial, the global recipe's trial, the
trials that trained a policy of their own, a trial's policy, and whether it met its
constraints. This module sits below both the Optuna side (:mod:`precsearch.study`) and
:mod:`precsearch.results`; it imports neither, nor Optuna, TensorFlow or pandas.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from precsearch.policy import Policy
from precsearch.records import Confirmation, ModelInfo, TrialResult
from precsearch.stats import corrected_low

BAR_ALPHA = 0.025  # how often the early stop's bar may lie above the best trial's speed

__all__ = [
    "answered_by_pins",
    "answered_by_probes",
    "answered_without_training",
    "baseline_of",
    "baseline_trial",
    "best_feasible_low",
    "stop_bar",
    "confirmation_of",
    "enqueue_baseline",
    "enqueue_predicted_best",
    "enqueue_twin",
    "fp32_result",
    "fp32_trial",
    "has_result",
    "is_feasible",
    "is_repeat",
    "mark_answered_by_pins",
    "mark_answered_by_probes",
    "mark_repeat",
    "measured_trials",
    "model_layers",
    "named_constraints",
    "reason_of",
    "repeat_of",
    "record_confirmation",
    "record_result",
    "record_worker",
    "result_of",
    "results_that_ran",
    "set_constraints",
    "status_of",
    "stored_policy",
    "study_record",
    "store_reference",
    "stored_references",
    "set_study_record",
    "trained_own_policy",
    "worker_of",
]

# A trial's user attributes.
_RESULT = "result"
_STATUS = "status"
_REASON = "reason"
_BASELINE = "baseline"
_REPEAT_OF = "duplicate_of"
_PROBE_REJECTED = "probe_rejected"
_PINNED = "pinned"
_TWIN_OF = "twin_of"
_ENQUEUED_BY_PROBES = "probe"
_HOST, _PID, _SAMPLER_SEED = "host", "pid", "sampler_seed"

# A study's user attributes: what `run` records when it creates a study (set together),
# what the probes and the confirmation record, and the FP32 reference runs by file name.
STUDY_RECORDS = (
    "space",
    "model_file",
    "loader",
    "budget",
    "tolerance",
    "model_info",
    "options",
    "hardware",
    "lr_rule",
    "probes",
    "pins",
    "localized",  # the localizing runs of a group that trains worse (study.pitfalls)
)
_CONFIRMATION = "confirmation"
_REFERENCE_PREFIX = "reference:"

# Parsed results by the identity of their stored dict (Optuna hands out the same
# FrozenTrial objects until a trial changes), so each is parsed once, not per reader.
_PARSED: OrderedDict[int, tuple[dict[str, Any], TrialResult]] = OrderedDict()
_PARSED_MAX = 4096


def has_result(trial: Any) -> bool:
    """Whether a trial holds a result (it trained, or repeats one that did)."""
    return _RESULT in trial.user_attrs


def result_of(trial: Any) -> TrialResult | None:
    """A trial's stored :class:`~precsearch.records.TrialResult` (``None`` before it
    has one)."""
    raw = trial.user_attrs.get(_RESULT)
    if not raw:  # none yet, or a repeat of a trial that had none
        return None
    cached = _PARSED.get(id(raw))
    if cached is not None and cached[0] is raw:
        _PARSED.move_to_end(id(raw))
        return cached[1]
    parsed = TrialResult.from_dict(raw)
    _PARSED[id(raw)] = (raw, parsed)
    if len(_PARSED) > _PARSED_MAX:
        _PARSED.popitem(last=False)
    return parsed


def record_result(trial: Any, result: TrialResult, max_points: int) -> None:
    """Store what a running trial measured (its curves down-sampled to ``max_points``),
    with its status and reason."""
    trial.set_user_attr(_RESULT, result.to_dict(max_points=max_points))
    trial.set_user_attr(_STATUS, result.status)
    trial.set_user_attr(_REASON, result.reason)


def status_of(trial: Any) -> str:
    """``ok``, ``infeasible``, ``too_slow``, ``failed`` (what the trial decided), else
    Optuna's state in lower case (``running``, ``waiting``, ``fail``)."""
    return trial.user_attrs.get(_STATUS, trial.state.name.lower())


def reason_of(trial: Any) -> str:
    """Why a trial is not ``ok`` (empty when it is, or before it decided)."""
    return trial.user_attrs.get(_REASON, "") or ""


def baseline_of(trial: Any) -> str:
    """The baseline a trial was enqueued as (``fp32``, ``global_bfloat16``...), or ``""``."""
    return str(trial.user_attrs.get(_BASELINE) or "")


def enqueue_baseline(study: Any, params: dict[str, Any], label: str) -> None:
    """Enqueue baseline ``label`` (once per study, however many processes ask)."""
    study.enqueue_trial(params, user_attrs={_BASELINE: label}, skip_if_exists=True)


def enqueue_twin(study: Any, params: dict[str, Any], parent: int) -> None:
    """Enqueue the FP32 twin of trial number ``parent`` (once)."""
    study.enqueue_trial(params, user_attrs={_TWIN_OF: parent}, skip_if_exists=True)


def enqueue_predicted_best(study: Any, params: dict[str, Any]) -> None:
    """Enqueue the policy the probes predict to be best (once)."""
    study.enqueue_trial(
        params, user_attrs={_ENQUEUED_BY_PROBES: "predicted best"}, skip_if_exists=True
    )


def record_worker(trial: Any, host: str, pid: int, sampler_seed: int) -> None:
    """Which process runs a trial (stale-trial detection reads it) and its sampler seed."""
    trial.set_user_attr(_HOST, host)
    trial.set_user_attr(_PID, pid)
    trial.set_user_attr(_SAMPLER_SEED, sampler_seed)


def worker_of(trial: Any) -> tuple[str | None, int | None]:
    """The host and process id that ran (or runs) a trial, where recorded."""
    return trial.user_attrs.get(_HOST), trial.user_attrs.get(_PID)


def is_repeat(trial: Any) -> bool:
    """Whether a trial is a sampler's repeat of a policy measured already (stored with
    the earlier figures, not run again, not counted)."""
    return _REPEAT_OF in trial.user_attrs


def repeat_of(trial: Any) -> int | None:
    """The number of the trial a sampler's repeat repeats (``None`` for any other)."""
    return trial.user_attrs.get(_REPEAT_OF)


def mark_repeat(trial: Any, measured: Any) -> None:
    """Store a running trial as a repeat of the trial ``measured`` (its figures copied)."""
    for key in (_RESULT, _STATUS, _REASON):
        trial.set_user_attr(key, measured.user_attrs.get(key, ""))
    trial.set_user_attr(_REPEAT_OF, measured.number)


def answered_by_probes(trial: Any) -> bool:
    """Whether the probes ruled a trial's policy out, so it never trained."""
    return bool(trial.user_attrs.get(_PROBE_REJECTED))


def mark_answered_by_probes(trial: Any) -> None:
    """Store a running trial as answered by the probes (it does not train)."""
    trial.set_user_attr(_PROBE_REJECTED, True)


def answered_by_pins(trial: Any) -> bool:
    """Whether a trial's policy put a pinned group in its dtype, so it never trained."""
    return bool(trial.user_attrs.get(_PINNED))


def mark_answered_by_pins(trial: Any) -> None:
    """Store a running trial as answered by the study's pins (it does not train)."""
    trial.set_user_attr(_PINNED, True)


def answered_without_training(trial: Any) -> bool:
    """Whether the probes or the pins answered a trial, so it never trained."""
    return answered_by_probes(trial) or answered_by_pins(trial)


def study_record(study: Any, key: str) -> Any:
    """One of :data:`STUDY_RECORDS` as stored (JSON data), ``None`` when absent;
    ``model_info`` comes back as its :class:`~precsearch.records.ModelInfo`."""
    if key not in STUDY_RECORDS:
        raise KeyError(f"{key!r} is not a study record (expected one of {STUDY_RECORDS})")
    value = study.user_attrs.get(key)
    if key == "model_info" and value is not None:
        return ModelInfo.from_dict(value)
    return value


def set_study_record(study: Any, key: str, value: Any) -> None:
    """Store one of :data:`STUDY_RECORDS` (a :class:`ModelInfo` as its JSON form)."""
    if key not in STUDY_RECORDS:
        raise KeyError(f"{key!r} is not a study record (expected one of {STUDY_RECORDS})")
    study.set_user_attr(key, value.to_dict() if isinstance(value, ModelInfo) else value)


def model_layers(study: Any) -> list[dict[str, Any]]:
    """The model's nested layers as recorded when the study was made (``[]`` before)."""
    info = study_record(study, "model_info")
    return info.layers if info else []


def confirmation_of(study: Any) -> Confirmation | None:
    """A study's confirmation record (``None`` before its confirmation)."""
    return Confirmation.from_dict(study.user_attrs.get(_CONFIRMATION))


def record_confirmation(study: Any, record: Confirmation) -> None:
    """Store the confirmation's record."""
    study.set_user_attr(_CONFIRMATION, record.to_dict())


def stored_references(study: Any) -> dict[str, dict[str, Any]]:
    """The FP32 reference runs a study holds: cache file name to the
    :class:`~precsearch.records.Reference` JSON form."""
    prefix = _REFERENCE_PREFIX
    return {
        key[len(prefix) :]: value
        for key, value in study.user_attrs.items()
        if key.startswith(prefix)
    }


def store_reference(study: Any, name: str, value: dict[str, Any]) -> None:
    """Store one FP32 reference run under its cache file name."""
    study.set_user_attr(_REFERENCE_PREFIX + name, value)


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


def trained_own_policy(trial: Any) -> bool:
    """Whether a trial trained a policy of its own: it holds a result and is neither a
    sampler's repeat nor a policy the probes or the pins answered without a trial."""
    return has_result(trial) and not is_repeat(trial) and not answered_without_training(trial)


def results_that_ran(trials: Iterable[Any]) -> list[TrialResult]:
    """The results of those of ``trials`` that trained a policy of their own
    (:func:`trained_own_policy`): what their time went on."""
    return [result_of(t) for t in trials if trained_own_policy(t)]


def measured_trials(study: Any) -> list[Any]:
    """The completed trials that measured a policy of their own (no repeats)."""
    return [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state.name == "COMPLETE" and has_result(t) and not is_repeat(t)
    ]


def best_feasible_low(study: Any, alpha: float = BAR_ALPHA) -> float:
    """The speedup a new trial must be able to reach to matter (the early stop's bar):
    among the feasible trials that ran, the highest lower bound at one-sided
    ``1 - alpha / k``, Bonferroni over those ``k`` trials, or 1 (FP32) when none is
    above it.

    The plain maximum of their 95% lower bounds is biased up (the more trials, the more
    of them read high by chance) and could stop the best policy; corrected for the
    maximum, the bar is above the fastest of them at most ``alpha`` of the time. On
    200 simulated searches (20 trials within 1.45-1.5x, instance offsets, the trial's own
    stop rule) the truly best (1.5x) was stopped in 4, against 7 with the plain maximum
    (``tests/test_early_stop.py``).
    """
    ran = [
        result_of(t).block_ratios
        for t in measured_trials(study)
        if trained_own_policy(t) and is_feasible(t)
    ]
    return stop_bar(ran, alpha)


def stop_bar(block_ratios: list[dict[str, Any]], alpha: float = BAR_ALPHA) -> float:
    """:func:`best_feasible_low` from the feasible trials' block figures."""
    lows = [corrected_low(f, alpha / len(block_ratios)) for f in block_ratios if f]
    return max([1.0, *lows])


def _enqueued_params(trial: Any) -> dict[str, Any]:
    """The parameters a trial was enqueued with (a waiting trial has suggested none)."""
    return trial.system_attrs.get("fixed_params", trial.params)


def baseline_trial(study: Any, label: str) -> Any | None:
    """The trial enqueued as baseline ``label`` (``fp32``, ``global_bfloat16``; a label
    ending in ``_`` is a prefix: ``global_`` for the first global recipe).

    A trial whose worker died is retried and the retry carries the label, so there may
    be several: the first COMPLETE one with a result, else the first of any state (whose
    reason says what happened to it); ``None`` when there is none. A label enqueued
    again with other parameters (a later pin: the global recipe without every pinned
    group) stands for its latest parameters (a retry is as old as its first try).
    """
    found, latest = [], {}
    for trial in study.get_trials(deepcopy=False):
        name = baseline_of(trial)
        if name.startswith(label) if label.endswith("_") else name == label:
            found.append(trial)
            first_try = (trial.system_attrs.get("retry_history") or [trial.number])[0]
            if first_try >= latest.get(name, (-1, None))[0]:
                latest[name] = (first_try, _enqueued_params(trial))
    found = [t for t in found if _enqueued_params(t) == latest[baseline_of(t)][1]]
    done = [t for t in found if t.state.name == "COMPLETE" and has_result(t)]
    return (done or found or [None])[0]


def fp32_trial(study: Any) -> Any | None:
    """The FP32 baseline trial (the user's own training measured as a trial), once it
    completed; ``None`` before."""
    trial = baseline_trial(study, "fp32")
    return trial if trial is not None and trial.state.name == "COMPLETE" else None


def fp32_result(study: Any) -> TrialResult | None:
    """The FP32 baseline trial's result (``None`` before it completed)."""
    trial = fp32_trial(study)
    return result_of(trial) if trial else None


def stored_policy(trial: Any) -> Policy:
    """The policy a trial ran, from its stored result."""
    return Policy.from_dict(result_of(trial).policy)
