"""The search: an Optuna study over policies, each trial run by a worker.

Objectives: maximise speedup, minimise the fidelity gap; feasibility is the constraint
``feasible`` (≤ 0 feasible) set with ``trial.set_constraint``. Infeasible and too-slow
trials are COMPLETE with penalty values and a positive constraint, so that samplers learn
from them; only crashes and timeouts are FAIL. FP32 and the global recipe for each
low-precision dtype are enqueued first (``skip_if_exists=True``).

Storage: a journal file ``<out>/<study>/study.journal`` by default; any Optuna RDB URL
(PostgreSQL for many machines, with heartbeats) with ``storage``. Each trial's
:class:`~precsearch.runner.TrialResult`, curves down-sampled, is in its user attrs, so
reports need only the storage.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precsearch.errors import TrialFailed, UserInputError
from precsearch.loaders import read_config
from precsearch.objectives import Fidelity
from precsearch.runner import Budget, TrialResult
from precsearch.space import SearchSpace, SpaceOptions

__all__ = [
    "PENALTY_GAP",
    "SAMPLERS",
    "SearchOptions",
    "make_sampler",
    "open_storage",
    "open_study",
    "run_study",
]

SAMPLERS = ("tpe", "nsga2", "random", "grid")
PENALTY_GAP = 1000.0
MAX_CURVE_POINTS = 256


@dataclass
class SearchOptions:
    """Everything ``precsearch run`` takes (``None`` means: the model file's
    ``precsearch_config``, else the default)."""

    trials: int | None = None
    timeout: float | None = None
    trial_timeout: float = 1800.0
    study_name: str | None = None
    storage: str | None = None
    out: str = "studies"
    group_by: str | None = None
    dtypes: str | list[str] | None = None
    steps: int | None = None
    tolerance: float | None = None
    sampler: str = "tpe"
    in_process: bool = False
    seed: int = 0
    lr_rule: str = "linear"
    batch_size: int | None = None
    env: dict[str, str] = field(default_factory=dict)

    def resolved(self, config: dict[str, Any]) -> SearchOptions:
        """These options with gaps filled from a model file's ``precsearch_config``."""
        filled = SearchOptions(**self.__dict__)
        defaults = {"trials": 16, "group_by": "type", "steps": None, "tolerance": 1.0}
        for key, default in defaults.items():
            if getattr(filled, key) is None:
                setattr(filled, key, config.get(key, default))
        if filled.dtypes is None and "dtypes" in config:
            filled.dtypes = config["dtypes"]
        if filled.batch_size is None and "batch_size" in config:
            filled.batch_size = config["batch_size"]
        if filled.sampler not in SAMPLERS:
            raise UserInputError(
                f"--sampler {filled.sampler!r}: expected one of {', '.join(SAMPLERS)}"
            )
        for key in ("trials", "steps"):
            value = getattr(filled, key)
            if value is not None and value < 1:
                raise UserInputError(f"--{key} {value}: expected a positive integer")
        return filled

    def budget(self) -> Budget:
        """The trial budget these options ask for."""
        return Budget(steps=self.steps) if self.steps else Budget()


def open_storage(storage: str | None, study_dir: Path) -> Any:
    """An Optuna storage: a journal file by default, an RDB URL with heartbeats."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    if storage is None or "://" not in storage:
        path = Path(storage) if storage else study_dir / "study.journal"
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    try:
        return optuna.storages.RDBStorage(storage, heartbeat_interval=60, grace_period=300)
    except Exception as exc:
        raise UserInputError(
            f"--storage {storage!r}: cannot open ({type(exc).__name__}: {exc})"
        ) from None


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


def open_study(name: str, storage: Any, sampler: Any = None) -> Any:
    """Create or resume the two-objective study ``name``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=name,
        storage=storage,
        sampler=sampler,
        directions=["maximize", "minimize"],
        load_if_exists=True,
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_stale_trials(study: Any, journal: bool) -> list[int]:
    """Mark FAIL the RUNNING trials of a run that was killed; return their numbers.

    A trial records its host and pid when it starts: one from this host whose process
    is gone is stale. With the (single-machine) journal, a RUNNING trial that died before
    recording them is stale too; RDB storages leave the rest to Optuna's heartbeats.
    """
    from optuna.trial import TrialState

    host = socket.gethostname()
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner, pid = trial.user_attrs.get("host"), trial.user_attrs.get("pid")
        if owner is None and not journal:
            continue
        if owner is not None and (owner != host or pid is None or _pid_alive(pid)):
            continue
        study._storage.set_trial_user_attr(trial._trial_id, "status", "failed")
        study._storage.set_trial_user_attr(
            trial._trial_id, "reason", "interrupted: its run was killed"
        )
        study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        failed.append(trial.number)
    return failed


def score(result: TrialResult, tolerance: float) -> tuple[tuple[float, float], float]:
    """Objective values and constraint of a trial that ran (not ``failed``).

    Feasible trials: ``(speedup, gap)`` and ``gap - tolerance`` (≤ 0). Others get penalty
    values the sampler can still learn from (the speed measured or, for too-slow ones,
    estimated by the watchdog; a capped gap) and a constraint ≥ 1.
    """
    gap = result.fidelity_gap
    gap = PENALTY_GAP if gap is None or not math.isfinite(gap) else min(gap, PENALTY_GAP)
    if result.status == "ok":
        return (float(result.speedup or 0.0), gap), gap - tolerance
    speedup = result.speedup
    if speedup is None:
        slowdown = result.numerics.get("watchdog_slowdown")
        speedup = 1.0 / slowdown if slowdown else 0.0
    if result.status == "infeasible" and result.numerics.get("nonfinite_step"):
        gap = PENALTY_GAP
    return (float(speedup), gap), 1.0 + max(0.0, gap - tolerance)


class Progress:
    """One line per finished trial: a bar, the trial, the best feasible speedup so far."""

    def __init__(self, total: int, stream: Any = None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.best: float | None = None

    def __call__(self, study: Any, trial: Any) -> None:
        self.done += 1
        status = trial.user_attrs.get("status", trial.state.name.lower())
        feasible = trial.constraints and trial.constraints.get("feasible", 1) <= 0
        if feasible and trial.values and (self.best is None or trial.values[0] > self.best):
            self.best = trial.values[0]
        width = 20
        filled = round(width * self.done / max(1, self.total))
        bar = "#" * filled + "-" * (width - filled)
        what = f"trial {trial.number:>3} {status:<10}"
        if trial.values:
            what += f" speedup {trial.values[0]:5.2f}x gap {trial.values[1]:7.2f}"
        reason = trial.user_attrs.get("reason", "")
        best = f"{self.best:.2f}x" if self.best is not None else "none yet"
        line = f"[{bar}] {self.done}/{self.total} {what} | best feasible {best}"
        if reason:
            line += f" | {reason[:80]}"
        print(line, file=self.stream, flush=True)


def _params_key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in params.items()))


def make_objective(
    space: SearchSpace, executor: Any, budget: Budget, tolerance: float
) -> Callable[[Any], tuple[float, float]]:
    """The Optuna objective: suggest a policy, run it in the executor, score it."""
    host, pid = socket.gethostname(), os.getpid()

    def objective(trial: Any) -> tuple[float, float]:
        from optuna.trial import TrialState

        trial.set_user_attr("host", host)
        trial.set_user_attr("pid", pid)
        policy = space.suggest(trial)
        key = _params_key(trial.params)
        for done in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if _params_key(done.params) == key and "result" in done.user_attrs:
                # The same policy again (samplers repeat themselves in small spaces):
                # its measurement stands; re-running would only cost time.
                for attr in ("result", "status", "reason"):
                    trial.set_user_attr(attr, done.user_attrs.get(attr, ""))
                trial.set_user_attr("duplicate_of", done.number)
                trial.set_constraint("feasible", done.constraints.get("feasible", 1.0))
                return tuple(done.values)
        result = executor.run_trial(policy, budget)
        trial.set_user_attr("result", result.to_dict(max_points=MAX_CURVE_POINTS))
        trial.set_user_attr("status", result.status)
        trial.set_user_attr("reason", result.reason)
        if result.status == "failed":
            raise TrialFailed(result.reason, result.numerics.get("detail", ""))
        values, constraint = score(result, tolerance)
        trial.set_constraint("feasible", constraint)
        return values

    return objective


def default_study_name(model_file: Path) -> str:
    """``studies/wide_mlp/model.py`` → ``wide_mlp``; ``my_net.py`` → ``my_net``."""
    return model_file.parent.name if model_file.stem == "model" else model_file.stem


@dataclass
class StudyRun:
    """What one ``run_study`` call did."""

    study: Any
    space: SearchSpace
    study_dir: Path
    paths: dict[str, Path]
    results: list[TrialResult]
    seconds: float
    notes: list[str]


def run_study(
    model_file: str | os.PathLike[str],
    options: SearchOptions,
    progress: Any = None,
    executor: Any = None,
) -> StudyRun:
    """Run (or resume) a study on a model file: the body of ``precsearch run``.

    Args:
        model_file: The user's model file.
        options: The run's options.
        progress: A stream for progress lines (default stderr).
        executor: A ready executor (``Worker`` or ``InProcess``); by default one is made
            from the options.

    Raises:
        UserInputError: Bad options, a broken model file, or a study that was created
            with another search space.
    """
    from precsearch import export
    from precsearch.worker import InProcess, Worker

    t_start = time.perf_counter()
    model_path = Path(model_file)
    config = read_config(model_path)
    options = options.resolved(config)
    name = options.study_name or default_study_name(model_path.resolve())
    study_dir = Path(options.out) / name
    work_dir = study_dir / "work"
    budget = options.budget()
    fidelity = Fidelity(tolerance=float(options.tolerance))
    space_options = SpaceOptions(
        group_by=options.group_by, dtypes=options.dtypes, lr_rule=options.lr_rule
    )
    storage = open_storage(options.storage, study_dir)

    own_executor = executor is None
    if executor is None:
        if options.in_process:
            from precsearch.loaders import load_model_file

            executor = InProcess(
                load_model_file(model_path), work_dir, budget, fidelity, options.batch_size
            )
        else:
            executor = Worker(
                model_path,
                work_dir,
                budget,
                fidelity,
                options.batch_size,
                trial_timeout=options.trial_timeout,
                env=options.env,
            )
    try:
        executor.start()
        import json

        info = json.loads((work_dir / "model_info.json").read_text())
        space = SearchSpace(info, space_options)
        sampler = make_sampler(options.sampler, space, options.seed, options.trials)
        study = open_study(name, storage, sampler)
        described = space.describe()
        stored = study.user_attrs.get("space")
        if stored is None:
            study.set_user_attr("space", described)
            study.set_user_attr("model_file", str(model_path.resolve()))
            study.set_user_attr("budget", budget.__dict__)
            study.set_user_attr("tolerance", fidelity.tolerance)
            study.set_user_attr("model_info", {k: v for k, v in info.items() if k != "layers"})
        elif stored != described:
            changed = sorted(k for k in described if stored.get(k) != described[k])
            raise UserInputError(
                f"study {name!r} was created with another search space (differs in "
                f"{', '.join(changed)}); resume it with the same options or pick a new "
                "--study-name"
            )
        elif study.user_attrs.get("budget") != budget.__dict__:
            warnings.warn(
                f"study {name!r} was run with budget {study.user_attrs.get('budget')}; "
                f"this run uses {budget.__dict__}: their trials are not comparable",
                stacklevel=2,
            )
        stale = fail_stale_trials(
            study, journal=options.storage is None or "://" not in options.storage
        )
        notes = list(space.options.notes)
        if stale:
            notes.append(f"marked trials {stale} failed: their run was killed")
        for label, params in space.baselines():
            study.enqueue_trial(params, user_attrs={"baseline": label}, skip_if_exists=True)

        from optuna.trial import TrialState

        before = {
            t.number for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING
        }
        objective = make_objective(space, executor, budget, fidelity.tolerance)
        study.optimize(
            objective,
            n_trials=options.trials,
            timeout=options.timeout,
            catch=(TrialFailed,),
            callbacks=[Progress(options.trials, progress)],
        )
    finally:
        if own_executor:
            executor.close()
    paths = {
        "study folder": study_dir,
        "storage": Path(options.storage or study_dir / "study.journal"),
    }
    paths["trials.csv"] = export.write_trials_csv(study, study_dir / "trials.csv")
    results = [
        TrialResult.from_dict(t.user_attrs["result"])
        for t in study.get_trials(deepcopy=False)
        if t.number not in before
        and "result" in t.user_attrs
        and "duplicate_of" not in t.user_attrs
    ]
    return StudyRun(
        study=study,
        space=space,
        study_dir=study_dir,
        paths=paths,
        results=results,
        seconds=time.perf_counter() - t_start,
        notes=notes,
    )
