"""The Optuna side of a search: the sampler, the objective, and a progress line per trial.

Objectives (plugins): maximise speedup, minimise the fidelity gap, plus any extra ones;
each objective may add a constraint with ``trial.set_constraint`` (≤ 0 feasible; the
fidelity objective's is feasibility itself). Infeasible and too-slow trials are
COMPLETE with a positive constraint, so that samplers learn from them (Optuna 5's
samplers rank infeasible trials by it); a value that was not measured (the gap of a
trial stopped before it was judged) is ``inf`` in its worse direction, which Optuna's
plots leave out, never a large stand-in number that would stretch them. Only crashes
and timeouts are FAIL (:class:`~precsearch.errors.TrialFailed`, caught by
``study.optimize``). Each trial's :class:`~precsearch.records.TrialResult`, curves
down-sampled, goes into its user attrs, so reports need only the storage.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from precsearch.cost_model import predicted, rejection
from precsearch.errors import StorageError, TrialFailed, one_line
from precsearch.pins import pinned_reason
from precsearch.records import Budget, TrialResult
from precsearch.stored import (
    answered_by_pins,
    answered_by_probes,
    answered_without_training,
    baseline_of,
    best_feasible_low,
    enqueue_twin,
    fp32_result,
    has_result,
    is_feasible,
    is_repeat,
    mark_answered_by_pins,
    mark_answered_by_probes,
    mark_repeat,
    named_constraints,
    reason_of,
    record_result,
    record_worker,
    result_of,
    set_constraints,
    status_of,
    study_record,
)
from precsearch.study.options import SearchOptions
from precsearch.study.pitfalls import low_groups, pin_failure, pin_quality, trains_worse
from precsearch.study.space import SearchSpace
from precsearch.study.storage import redact, storage_failure

__all__ = ["Progress", "make_objective", "make_sampler", "search_trials"]

MAX_CURVE_POINTS = 256
STORAGE_RETRY_S = (1.0, 2.0, 4.0, 8.0)  # waits before giving up on a lost storage
MAX_REPEATS = 50  # proposals in a row of measured policies before the search stops


def make_sampler(name: str, space: SearchSpace, seed: int, trials: int) -> Any:
    """The Optuna sampler called ``name`` for this space."""
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=max(4, min(10, trials // 2)), multivariate=True
        )
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(
            seed=seed, population_size=max(4, min(50, trials // 3))
        )
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.GridSampler(space.choices(), seed=seed)


class Progress:
    """Counts the new trials (a sampler's repeat of a measured policy is not one) and
    stops the study after ``total`` of them, or once every policy of the space has been
    measured; prints one line per new trial: a bar, the trial, the best feasible speedup
    so far.

    Args:
        total: New trials to run.
        space_size: How many distinct policies the space holds.
        stream: Where the lines go (default stderr).
    """

    def __init__(self, total: int, space_size: int, stream: Any = None) -> None:
        self.total = total
        self.space_size = space_size
        self.done = 0
        self.exhausted = False
        self.repeats = 0
        self.rejected = 0
        self.pinned = 0
        self.stream = stream or sys.stderr
        self.best: float | None = None
        self.notes: list[str] = []

    def __call__(self, study: Any, trial: Any) -> None:
        from optuna.trial import TrialState

        measured = {
            _params_key(t.params)
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        }
        if len(measured) >= self.space_size:
            self.exhausted = True
            study.stop()
        if answered_by_probes(trial):
            self.rejected += 1
        if answered_by_pins(trial):
            self.pinned += 1
        if is_repeat(trial) or answered_without_training(trial):
            # Neither ran: a repeat has its earlier figures, a rejection the probes' or
            # the pins'.
            self.repeats += 1
            if self.repeats >= MAX_REPEATS:  # the sampler is stuck on what it measured
                self.exhausted = True
                study.stop()
            return
        self.repeats = 0
        self.done += 1
        if self.done >= self.total:
            study.stop()
        self._line(trial)

    def _line(self, trial: Any) -> None:
        result = result_of(trial)
        judging = result.numerics.get("judging") if result else None
        if judging and judging not in self.notes:
            # What the budget cannot judge, said once, before the trials it shapes.
            self.notes.append(judging)
            print(f"note: {judging}", file=self.stream, flush=True)
        status = status_of(trial)
        if (
            is_feasible(trial)
            and trial.values
            and (self.best is None or trial.values[0] > self.best)
        ):
            self.best = trial.values[0]
        width = 20
        filled = round(width * self.done / max(1, self.total))
        bar = "#" * filled + "-" * (width - filled)
        what = f"trial {trial.number:>3} {status:<10}"
        if trial.values:
            # The measured gap: a trial stopped before it was judged has none (its
            # objective value is inf).
            gap = result.fidelity_gap if result else None
            finite = isinstance(gap, float | int) and math.isfinite(gap)
            what += f" speedup {trial.values[0]:5.2f}x gap {f'{gap:7.2f}' if finite else '-':>7}"
        reason = reason_of(trial)
        best = f"{self.best:.2f}x" if self.best is not None else "none yet"
        line = f"[{bar}] {self.done}/{self.total} {what} | best feasible {best}"
        if reason:
            line += f" | {reason[:80]}"
        print(line, file=self.stream, flush=True)


def _params_key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in params.items()))


def make_objective(
    space: SearchSpace,
    executor: Any,
    budget: Budget,
    objectives: list[Any],
    seed: int = 0,
    probes: dict[str, Any] | None = None,
    say: Callable[[str], None] | None = None,
) -> Callable[[Any], tuple[float, ...]]:
    """The Optuna objective: suggest a policy, run it in the executor, score it.

    A policy with a dtype the probes ruled out (:func:`precsearch.cost_model.rejection`)
    is answered ``too_slow`` without running, its speedup the probes' prediction
    (``probe_rejected`` in its result's numerics); one that puts a pinned group in its
    dtype (:func:`precsearch.pins.pinned_reason`) is answered ``infeasible``; the
    baselines always run. A trial that breaks in low precision (an error, a non-finite
    loss) is localized (:mod:`precsearch.study.pitfalls`): the groups that break are
    pinned float32, each said in one line through ``say`` (default: stderr), and the
    trial is ``infeasible`` with the pin as its reason. A trial that trains worse than
    FP32, or whose loss scale collapses, its FP32 twin healthy, is localized on runs of
    its budget (:func:`precsearch.study.pitfalls.pin_quality`) and keeps its verdict.

    Every objective plugin gives a value (those with a direction) and may give a
    constraint. A value that is missing or NaN (which Optuna refuses) becomes ``inf`` in
    its worse direction. Each trial records the host, process and sampler
    seed that ran it.
    """
    host, pid = socket.gethostname(), os.getpid()
    reference_cache: dict[str, TrialResult] = {}

    def reference(study: Any) -> TrialResult | None:
        # The FP32 baseline trial once it completed (precsearch.stored.fp32_trial's rule);
        # it does not change after that.
        if "fp32" not in reference_cache and (found := fp32_result(study)) is not None:
            reference_cache["fp32"] = found
        return reference_cache.get("fp32")

    def objective(trial: Any) -> tuple[float, ...]:
        from optuna.trial import TrialState

        record_worker(trial, host, pid, seed)
        policy = space.suggest(trial)
        key = _params_key(trial.params)
        for done in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if _params_key(done.params) == key and has_result(done):
                # The same policy again (samplers repeat themselves in small spaces):
                # its measurement stands; re-running would only cost time.
                mark_repeat(trial, done)
                set_constraints(trial, named_constraints(done))
                return tuple(done.values)
        baseline = baseline_of(trial) != ""
        result = None if baseline else _answered(trial, policy, probes)
        if result is None:
            # A trial confidently slower than the best feasible one cannot be the answer:
            # it stops after its first blocks. The bar is corrected for the maximum over
            # the feasible trials (best_feasible_low), so it rarely stops the best. The
            # baselines are held to FP32's speed only: the global recipe's own verdict is
            # a figure the report shows.
            bar = 1.0 if baseline else best_feasible_low(trial.study)
            result = executor.run_trial(policy, replace(budget, stop_below=bar))
            if _broke(result) and low_groups(trial.params):
                result = _pinned(trial, executor, space, result, say or _to_stderr)
            elif trains_worse(result) and low_groups(trial.params):
                params = dict(trial.params)
                pin_quality(trial.study, executor, space, params, result, budget, say or _to_stderr)
        record_result(trial, result, MAX_CURVE_POINTS)
        if result.status == "failed":
            raise TrialFailed(result.reason, result.numerics.get("detail", ""))
        twin = space.twin(dict(trial.params))
        at_users_setting = (policy.batch_size, policy.jit_compile) == (
            space.info["batch_size"], bool(space.info.get("jit_compile", False)))  # fmt: skip
        if result.status == "ok" and twin is not None and not at_users_setting:
            # FP32 at this batch size and XLA setting is a candidate too: the answer must
            # not be beaten by its own decomposition.
            enqueue_twin(trial.study, twin, trial.number)
        values, constraints = _score(objectives, result, reference(trial.study))
        set_constraints(trial, constraints)
        return values

    return objective


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _answered(trial: Any, policy: Any, probes: dict[str, Any] | None) -> TrialResult | None:
    """The result of a trial answered without training: its policy puts a pinned group
    in its dtype, or a dtype the probes ruled out (``None``: it trains)."""
    pinned = pinned_reason(study_record(trial.study, "pins"), trial.params)
    if pinned:
        mark_answered_by_pins(trial)
        return TrialResult(policy=policy.to_dict(), status="infeasible", reason=pinned,
                           numerics={"pinned": True})  # fmt: skip
    ruled = rejection(probes, trial.params)
    if ruled:
        mark_answered_by_probes(trial)
        return TrialResult(
            policy=policy.to_dict(), status="too_slow", reason=ruled,
            speedup=predicted(probes, trial.params), numerics={"probe_rejected": True},
        )  # fmt: skip
    return None


def _broke(result: TrialResult) -> bool:
    """Whether a trial broke in a way one batch can show: an error (not a timeout or
    running out of memory) or a non-finite loss."""
    failed = result.status == "failed" and result.reason.startswith("error:")
    return failed or result.numerics.get("nonfinite_step") is not None


def _pinned(
    trial: Any, executor: Any, space: SearchSpace, result: TrialResult, say: Callable[[str], None]
) -> TrialResult:
    """A trial that broke, localized (:func:`precsearch.study.pitfalls.pin_failure`):
    ``infeasible`` with its pin as the reason (the error kept in its numerics), or as it
    was where nothing breaks on one batch or the localizing itself failed."""
    try:
        pin_failure(trial.study, executor, space, dict(trial.params), say)
    except TrialFailed as exc:
        say(f"note: trial {trial.number} broke and could not be localized ({exc})")
        return result
    reason = pinned_reason(study_record(trial.study, "pins"), trial.params)
    if not reason:
        return result
    numerics = {**result.numerics, "broke": result.reason}
    return replace(result, status="infeasible", reason=reason, numerics=numerics)


def _score(
    objectives: list[Any], result: TrialResult, reference: TrialResult | None
) -> tuple[tuple[float, ...], dict[str, float]]:
    """Each objective plugin's value (those with a direction; a missing or NaN value,
    which Optuna refuses, is ``inf`` in its worse direction) and constraints by name."""
    values, constraints = [], {}
    for plugin in objectives:
        constraint = plugin.constraint(result, reference)
        if constraint is not None:
            constraints[plugin.name] = float(constraint)
        if plugin.direction is None:
            continue
        value = plugin.value(result, reference)
        if value is None or math.isnan(value):
            value = -math.inf if plugin.direction == "maximize" else math.inf
        values.append(float(value))
    return tuple(values), constraints


def search_trials(
    study: Any,
    objective: Any,
    options: SearchOptions,
    space: SearchSpace,
    progress: Any,
    callbacks: list[Any],
) -> list[str]:
    """``study.optimize`` for ``options.trials`` new trials (repeats of a measured policy
    do not count), quiet (a progress line per trial says what Optuna would log with a
    traceback). A storage that fails mid-study is tried again after waits of
    ``STORAGE_RETRY_S``; then the failure is one error. Returns notes for people."""
    import optuna

    if not options.trials:
        return []
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    size = math.prod(len(values) for values in space.choices().values())
    counter = Progress(options.trials, size, progress)
    deadline = time.monotonic() + options.timeout if options.timeout else None
    waits = list(STORAGE_RETRY_S)
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            study.optimize(
                objective, timeout=left, catch=(TrialFailed,), callbacks=[counter, *callbacks]
            )
            break
        except Exception as exc:
            # Optuna can mask a storage error behind one of its own (an UnboundLocalError
            # was seen when PostgreSQL went away mid-trial): look down the chain for it.
            lost = storage_failure(exc)
            if lost is None:
                raise
            what = redact(one_line(lost))
            if not waits:
                raise StorageError(
                    f"the storage failed mid-study ({what}); the trials it completed are "
                    "kept there: run again once it is back"
                ) from exc
            wait = waits.pop(0)
            print(
                f"storage lost ({what[:120]}); trying again in {wait:g} s",
                file=progress or sys.stderr,
                flush=True,
            )
            time.sleep(wait)
    notes = list(counter.notes)
    if counter.rejected:
        notes.append(
            f"{counter.rejected} proposals were answered by the probes without running "
            "(a dtype they ruled out; not counted as trials)"
        )
    if counter.pinned:
        notes.append(
            f"{counter.pinned} proposals were answered by the pins without running (a group "
            "kept float32 in the dtype that breaks it; not counted as trials)"
        )
    if counter.exhausted and counter.done < options.trials:
        answered = " or the probes ruled out" if counter.rejected else ""
        answered += " or the pins answered" if counter.pinned else ""
        notes.append(
            f"stopped after {counter.done} new trials: the sampler proposes only policies "
            f"it measured already{answered} "
            f"(the space holds {size})"
        )
    return notes
