"""The search: an Optuna study over policies, each trial run by a worker.

Objectives (plugins): maximise speedup, minimise the fidelity gap, plus any extra ones;
each objective may add a constraint with ``trial.set_constraint`` (≤ 0 feasible; the
fidelity objective's is feasibility itself). Infeasible and too-slow
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
import re
import socket
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precsearch.errors import TrialFailed, UserInputError
from precsearch.loaders import ModelSpec
from precsearch.objectives import Fidelity, is_feasible
from precsearch.plugins import create, get
from precsearch.runner import Budget, TrialResult
from precsearch.space import SearchSpace, SpaceOptions

__all__ = [
    "DEFAULT_EXPORTERS",
    "SAMPLERS",
    "SearchResult",
    "SearchOptions",
    "make_sampler",
    "open_storage",
    "open_study",
    "load_study",
    "run_study",
    "search",
]

SAMPLERS = ("tpe", "nsga2", "random", "grid")
DEFAULT_EXPORTERS = ("policy_json", "saved_model", "trials_csv")
MAX_CURVE_POINTS = 256
EXTRA_PENALTY = 1e12


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
    confirm_top: int = 3
    rounds: int = 5
    watchdog: float | None = None
    dimensions: list[str] | None = None
    objectives: list[str] = field(default_factory=list)
    exporters: list[str] = field(default_factory=list)
    loader: str = "model_file"
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
        if filled.trials is not None and filled.trials < 0:
            raise UserInputError(f"--trials {filled.trials}: expected 0 or more")
        if filled.steps is not None and filled.steps < 1:
            raise UserInputError(f"--steps {filled.steps}: expected a positive integer")
        return filled

    def shared(self) -> dict[str, Any]:
        """What every worker of a study must run the same way (stored in the study)."""
        keys = (
            "group_by", "dtypes", "steps", "tolerance", "sampler", "lr_rule", "batch_size",
            "watchdog", "dimensions", "objectives", "loader", "trial_timeout",
        )  # fmt: skip
        return {key: getattr(self, key) for key in keys}

    def budget(self) -> Budget:
        """The trial budget these options ask for."""
        changes: dict[str, Any] = {}
        if self.steps:
            changes["steps"] = self.steps
        if self.watchdog:
            changes["watchdog"] = self.watchdog
        return Budget(**changes)


def open_storage(storage: str | None, study_dir: Path) -> Any:
    """An Optuna storage: a journal file by default, an RDB URL with heartbeats."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    if storage is None or "://" not in storage:
        path = Path(storage) if storage else study_dir / "study.journal"
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
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


def open_study(
    name: str, storage: Any, sampler: Any = None, directions: list[str] | None = None
) -> Any:
    """Create or resume the study ``name`` (speedup up, fidelity gap down by default)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=name,
        storage=storage,
        sampler=sampler,
        directions=directions or ["maximize", "minimize"],
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
    space: SearchSpace, executor: Any, budget: Budget, objectives: list[Any]
) -> Callable[[Any], tuple[float, ...]]:
    """The Optuna objective: suggest a policy, run it in the executor, score it.

    Every objective plugin gives a value (those with a direction) and may give a
    constraint. Values must be finite for the samplers: a non-finite extra value becomes
    a large penalty in its direction.
    """
    host, pid = socket.gethostname(), os.getpid()
    reference_cache: dict[str, TrialResult] = {}

    def reference(study: Any) -> TrialResult | None:
        if "fp32" not in reference_cache:
            for done in study.get_trials(deepcopy=False):
                if done.user_attrs.get("baseline") == "fp32" and "result" in done.user_attrs:
                    reference_cache["fp32"] = TrialResult.from_dict(done.user_attrs["result"])
        return reference_cache.get("fp32")

    def objective(trial: Any) -> tuple[float, ...]:
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
                for name, value in (done.constraints or {}).items():
                    trial.set_constraint(name, value)
                return tuple(done.values)
        result = executor.run_trial(policy, budget)
        trial.set_user_attr("result", result.to_dict(max_points=MAX_CURVE_POINTS))
        trial.set_user_attr("status", result.status)
        trial.set_user_attr("reason", result.reason)
        if result.status == "failed":
            raise TrialFailed(result.reason, result.numerics.get("detail", ""))
        ref = reference(trial.study)
        values = []
        for plugin in objectives:
            constraint = plugin.constraint(result, ref)
            if constraint is not None:
                trial.set_constraint(plugin.name, float(constraint))
            if plugin.direction is None:
                continue
            value = plugin.value(result, ref)
            if value is None or not math.isfinite(value):
                value = -EXTRA_PENALTY if plugin.direction == "maximize" else EXTRA_PENALTY
            values.append(float(value))
        return tuple(values)

    return objective


def _invert(figures: dict[str, float]) -> dict[str, float]:
    return {
        "median": 1 / figures["median"],
        "min": 1 / figures["max"],
        "max": 1 / figures["min"],
        "rounds": figures["rounds"],
    }


def confirm(
    study: Any, executor: Any, top: int = 3, rounds: int = 5, block: int = 10
) -> dict[str, Any]:
    """Re-measure the best feasible candidates and choose the answer; store the record.

    The top ``top`` feasible Pareto trials (and the global recipe, if feasible) are timed
    in one worker, round by round, interleaved with FP32, a second copy of FP32 and the
    global recipe. The answer is the fastest whose median speedup over FP32 is above 1
    and above every round of the FP32 copy (what the instrument scores by chance); if
    none is, the answer is FP32 — never a policy that did not confirm faster.

    Returns:
        The record, also stored as the study's ``confirmation`` user attr.
    """
    from precsearch.export import stored_policy

    by_label = {
        t.user_attrs.get("baseline"): t
        for t in study.get_trials(deepcopy=False)
        if t.state.name == "COMPLETE" and t.user_attrs.get("baseline")
    }
    fp32_trial = by_label.get("fp32")
    if fp32_trial is None:
        raise TrialFailed("no FP32 baseline", "the FP32 baseline trial did not complete")
    fp32_policy = stored_policy(fp32_trial)
    global_trial = next((t for label, t in by_label.items() if label.startswith("global_")), None)
    global_policy = stored_policy(global_trial) if global_trial else None

    front = [
        t
        for t in study.best_trials
        if "duplicate_of" not in t.user_attrs and stored_policy(t) != fp32_policy
    ]
    chosen = sorted(front, key=lambda t: -t.values[0])[:top]
    if global_trial is not None and is_feasible(global_trial) and global_trial not in chosen:
        chosen.append(global_trial)
    figures = executor.confirm(
        [stored_policy(t) for t in chosen], global_policy, rounds=rounds, block=block
    )
    candidates = [
        {"trial": t.number, **entry} for t, entry in zip(chosen, figures["candidates"], strict=True)
    ]
    null = figures["null_vs_fp32"]
    bar = max(1.0, null["max"])
    winners = [c for c in candidates if c["speedup_vs_fp32"]["median"] > bar]
    record: dict[str, Any] = {
        "rounds": rounds,
        "block": block,
        "candidates": candidates,
        "fp32_trial": fp32_trial.number,
        "global_trial": global_trial.number if global_trial else None,
        "global_vs_fp32": figures["global_vs_fp32"],
        "null_vs_fp32": null,
        "bar": bar,
        "fp32_samples_per_s": figures["fp32_samples_per_s"],
    }
    if winners:
        best = max(winners, key=lambda c: c["speedup_vs_fp32"]["median"])
        vs = best["speedup_vs_fp32"]
        record.update(best_trial=best["trial"], best_is_fp32=False)
        record["best"] = {k: best[k] for k in ("speedup_vs_fp32", "speedup_vs_global_mixed")}
        verdict = (
            f"trial {best['trial']} is {vs['median']:.2f}x FP32 (min {vs['min']:.2f}, "
            f"max {vs['max']:.2f}, {vs['rounds']} rounds)"
        )
        if best["speedup_vs_global_mixed"]:
            g = best["speedup_vs_global_mixed"]
            verdict += f" and {g['median']:.2f}x the global mixed recipe"
        verdict += (
            f"; a copy of FP32 measured {null['median']:.2f}x "
            f"({null['min']:.2f}-{null['max']:.2f}), the instrument's error"
        )
    else:
        record.update(best_trial=fp32_trial.number, best_is_fp32=True)
        ones = {"median": 1.0, "min": 1.0, "max": 1.0, "rounds": rounds}
        global_vs = figures["global_vs_fp32"]
        record["best"] = {
            "speedup_vs_fp32": ones,
            "speedup_vs_global_mixed": _invert(global_vs) if global_vs else None,
        }
        fastest = max(candidates, key=lambda c: c["speedup_vs_fp32"]["median"], default=None)
        verdict = "nothing beat FP32 when re-measured: the answer is FP32"
        if fastest:
            verdict += (
                f" (the fastest candidate, trial {fastest['trial']}, confirmed at "
                f"{fastest['speedup_vs_fp32']['median']:.2f}x"
            )
            if fastest["speedup_vs_fp32"]["median"] > 1.0:
                verdict += f", not above the {bar:.2f}x a copy of FP32 reached"
            verdict += ")"
        else:
            verdict += " (no candidate other than FP32 was feasible)"
    record["verdict"] = verdict
    study.set_user_attr("confirmation", record)
    return record


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
    verdict: str = ""


def export_winner(
    study: Any,
    directory: Path,
    exporters: list[str],
    model_exports: Callable[[Any, list[str]], Any],
) -> dict[str, Path]:
    """Run exporter plugins on the confirmed best policy; return what they wrote.

    Exporters that need the trained model go through ``model_exports(policy, names)``
    (a worker trains the policy for the budget once for all of them); the others get
    the study here.
    """
    from precsearch.export import best_policy_with_manifest
    from precsearch.plugins import Winner

    directory.mkdir(parents=True, exist_ok=True)
    best = best_policy_with_manifest(study)
    written: list[Path] = []
    needs_model = [
        spec for spec in exporters if get("exporter", spec.partition("=")[0]).needs_model
    ]
    for spec in exporters:
        if spec not in needs_model:
            written += create("exporter", spec).export(Winner(policy=best, study=study), directory)
    if needs_model:
        written += [Path(p) for p in model_exports(best, needs_model)]
    return {path.name: path for path in written}


def run_study(
    model: str | os.PathLike[str] | ModelSpec,
    options: SearchOptions,
    progress: Any = None,
    executor: Any = None,
) -> StudyRun:
    """Run (or resume) a study: the body of ``precsearch run`` and ``precsearch.search``.

    Args:
        model: A source for the loader (a model file's path by default), or a spec of
            callables (run in this process).
        options: The run's options.
        progress: A stream for progress lines (default stderr).
        executor: A ready executor (``Worker`` or ``InProcess``); by default one is made
            from the options.

    Raises:
        UserInputError: Bad options, a broken model file, an unknown plugin, or a study
            that was created with another search space.
    """
    import json

    from optuna.trial import TrialState

    from precsearch import export
    from precsearch.worker import InProcess, Worker

    t_start = time.perf_counter()
    spec = model if isinstance(model, ModelSpec) else None
    model_path = None if spec is not None else Path(model).resolve()
    loader = create("loader", options.loader)
    config = spec.config if spec is not None else loader.config(model_path)
    options = options.resolved(config)
    objectives = [
        create("objective", "speedup"),
        create("objective", f"fidelity={options.tolerance}"),
        *[create("objective", name) for name in options.objectives],
    ]
    exporters = [*DEFAULT_EXPORTERS, *[e for e in options.exporters if e not in DEFAULT_EXPORTERS]]
    for name in exporters:
        get("exporter", name.partition("=")[0])  # unknown or broken: fail before any trial
    if spec is not None and not options.in_process:
        warnings.warn(
            "a model given as callables runs its trials in this process: crashes and hangs "
            "are not isolated (pass a model file for that)",
            stacklevel=2,
        )
        options.in_process = True
    name = options.study_name or (
        default_study_name(model_path)
        if model_path
        else re.sub(r"[^\w.-]", "_", spec.source.strip("<>").split()[-1].split(".")[-1])
    )
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
            executor = InProcess(
                spec or loader.load(model_path), work_dir, budget, fidelity, options.batch_size
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
                loader=options.loader,
            )
    verdict = ""
    paths = {
        "study folder": study_dir,
        "storage": Path(options.storage or study_dir / "study.journal"),
    }
    try:
        executor.start()
        info = json.loads((work_dir / "model_info.json").read_text())
        space = SearchSpace(info, space_options, options.dimensions)
        sampler = make_sampler(options.sampler, space, options.seed, options.trials)
        described = {**space.describe(), "objectives": [o.name for o in objectives]}
        study = open_study(name, storage, sampler, [o.direction for o in objectives if o.direction])
        stored = study.user_attrs.get("space")
        if stored is None:
            study.set_user_attr("space", described)
            study.set_user_attr("model_file", str(model_path) if model_path else spec.source)
            study.set_user_attr("loader", options.loader)
            study.set_user_attr("budget", budget.__dict__)
            study.set_user_attr("tolerance", fidelity.tolerance)
            study.set_user_attr("model_info", info)
            study.set_user_attr("options", {**options.shared(), "dtypes": space.dtypes})
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
        journal = options.storage is None or "://" not in options.storage
        stale = fail_stale_trials(study, journal=journal)
        notes = list(space.options.notes)
        if stale:
            notes.append(f"marked trials {stale} failed: their run was killed")
        for label, params in space.baselines():
            study.enqueue_trial(params, user_attrs={"baseline": label}, skip_if_exists=True)

        before = {
            t.number for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING
        }
        study.optimize(
            make_objective(space, executor, budget, objectives),
            n_trials=options.trials,
            timeout=options.timeout,
            catch=(TrialFailed,),
            callbacks=[Progress(options.trials, progress)],
        )
        if options.confirm_top > 0:
            try:
                record = confirm(
                    study, executor, options.confirm_top, options.rounds, max(10, budget.block)
                )
                verdict = record["verdict"]

                def model_exports(policy: Any, names: list[str]) -> list[str]:
                    return executor.export(policy, names, study_dir)["paths"]

                paths.update(export_winner(study, study_dir, exporters, model_exports))
            except TrialFailed as exc:
                first = str(exc).splitlines()[0][:300]
                notes.append(f"confirmation or export failed ({first}); the trials stand")
    finally:
        if own_executor:
            executor.close()
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
        verdict=verdict,
    )


def find_study(
    name_or_dir: str | os.PathLike[str], storage: str | None = None, out: str = "studies"
) -> tuple[Any, Path]:
    """Open an existing study by folder, or by name (in ``out`` or in ``storage``).

    Raises:
        UserInputError: No such study.
    """
    import optuna

    path = Path(name_or_dir)
    if storage is None:
        folder = path if (path / "study.journal").exists() else Path(out) / str(name_or_dir)
        if not (folder / "study.journal").exists():
            raise UserInputError(
                f"{name_or_dir}: no study here (expected a folder with study.journal, or a "
                "study name with --storage)"
            )
        store = open_storage(None, folder)
        names = optuna.get_all_study_names(store)
        name = folder.name if folder.name in names else (names[0] if names else folder.name)
    else:
        store = open_storage(storage, path)
        name = path.name if path.name else str(name_or_dir)
        folder = Path(out) / name
    try:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(study_name=name, storage=store)
    except KeyError:
        raise UserInputError(f"{name_or_dir}: no study named {name!r} in that storage") from None
    return study, folder


def worker_options(
    name: str,
    storage: str,
    out: str = "studies",
    trials: int | None = None,
    timeout: float | None = None,
    model_file: str | None = None,
) -> tuple[str, SearchOptions]:
    """The model file and options for one more worker of an existing shared study.

    Everything that defines the study comes from the study itself; this worker runs
    trials only (the confirmation is left to a ``run``, say ``run --trials 0``), and
    its sampler seed is its process id, so that workers do not propose the same trials.

    Raises:
        UserInputError: No such study, one made before workers existed, or no model file.
    """
    study, _ = find_study(name, storage, out)
    shared = study.user_attrs.get("options")
    if shared is None:
        raise UserInputError(
            f"study {study.study_name!r} has no stored options (made by an older precsearch): "
            "join it with `precsearch run` and the same options instead"
        )
    path = model_file or study.user_attrs.get("model_file", "")
    if not Path(path).is_file():
        raise UserInputError(
            f"{path}: the study's model file is not on this machine (pass --model-file)"
        )
    options = SearchOptions(
        **shared,
        trials=trials,
        timeout=timeout,
        study_name=study.study_name,
        storage=storage,
        out=out,
        seed=os.getpid(),
        confirm_top=0,
    )
    return path, options


class SearchResult:
    """A study's results, for notebooks: from :func:`search` or :func:`load_study`.

    Attributes:
        study: The Optuna study.
        study_dir: Its folder (policy, SavedModel, trials.csv).
        notes: What the run wanted a person to know.
    """

    def __init__(self, study: Any, study_dir: Path, notes: list[str] | None = None) -> None:
        self.study = study
        self.study_dir = Path(study_dir)
        self.notes = notes or []

    def __repr__(self) -> str:
        best = self.confirmation.get("verdict", "not confirmed yet")
        return f"<SearchResult {self.study.study_name!r}: {len(self.study.trials)} trials; {best}>"

    @property
    def trials(self) -> Any:
        """Every trial as a pandas DataFrame (the columns of ``trials.csv``)."""
        from precsearch.export import trials_frame

        return trials_frame(self.study)

    @property
    def pareto(self) -> Any:
        """The feasible Pareto front as a pandas DataFrame, fastest first."""
        import pandas as pd

        from precsearch.report import pareto_rows

        return pd.DataFrame(pareto_rows(self.study))

    @property
    def confirmation(self) -> dict[str, Any]:
        """The confirmation record (empty before confirmation)."""
        return self.study.user_attrs.get("confirmation") or {}

    @property
    def best_policy(self) -> Any:
        """The confirmed best :class:`~precsearch.policy.Policy`, manifest filled in
        (``None`` before confirmation)."""
        from precsearch.export import best_policy_with_manifest

        if not self.confirmation:
            return None
        return best_policy_with_manifest(self.study)

    @property
    def reference(self) -> TrialResult | None:
        """The FP32 baseline trial's result: FP32's speed and loss curve in this study."""
        for trial in self.study.trials:
            if trial.user_attrs.get("baseline") == "fp32" and "result" in trial.user_attrs:
                return TrialResult.from_dict(trial.user_attrs["result"])
        return None

    def export(
        self, directory: str | os.PathLike[str], exporters: list[str] | None = None
    ) -> dict[str, Path]:
        """Run exporters into a folder: by default ``best_policy.json``,
        ``saved_model/`` and ``trials.csv``.

        A SavedModel already in the study folder is copied; otherwise (say, the study
        came from a shared storage, or another model exporter is named) the best policy
        is trained again for the budget in a worker and the model exporters run there.
        """
        import shutil

        from precsearch.export import write_trials_csv

        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        if not self.confirmation:
            return {"trials.csv": write_trials_csv(self.study, target / "trials.csv")}
        source = self.study_dir / "saved_model"

        def model_exports(policy: Any, names: list[str]) -> list[str]:
            if names == ["saved_model"] and source.exists():
                destination = target / "saved_model"
                if source.resolve() != destination.resolve():
                    shutil.rmtree(destination, ignore_errors=True)
                    shutil.copytree(source, destination)
                return [str(destination)]
            return self._train_and_export(policy, names, target)

        return export_winner(
            self.study, target, list(exporters or DEFAULT_EXPORTERS), model_exports
        )

    def _train_and_export(self, policy: Any, names: list[str], target: Path) -> list[str]:
        from precsearch.worker import Worker

        model_file = self.study.user_attrs.get("model_file", "")
        if not Path(model_file).is_file():
            raise UserInputError(
                f"no SavedModel in {self.study_dir} and the model file {model_file!r} is not "
                "here to train one"
            )
        budget = Budget(**self.study.user_attrs.get("budget", {}))
        loader = self.study.user_attrs.get("loader", "model_file")
        with Worker(model_file, self.study_dir / "work", budget, loader=loader) as worker:
            return worker.export(policy, names, target)["paths"]


def load_study(
    name_or_dir: str | os.PathLike[str], storage: str | None = None, out: str = "studies"
) -> SearchResult:
    """The results of an existing study, by folder or by name (+ ``storage``)."""
    study, folder = find_study(name_or_dir, storage, out)
    return SearchResult(study, folder)


def search(
    model: str | os.PathLike[str] | Any,
    train_data: Any = None,
    *,
    val_data: Any = None,
    compile_kwargs: Any = None,
    progress: Any = None,
    **options: Any,
) -> SearchResult:
    """Run a study from a notebook; the keyword options are those of ``precsearch run``.

    Args:
        model: A model file's path, or a function returning a ``keras.Model`` (then
            ``train_data`` is required and trials run in this process).
        train_data: Unbatched examples, or a function returning them (callables only).
        val_data: Optional validation examples (callables only).
        compile_kwargs: ``model.compile`` arguments (callables only; else the model must
            come compiled).
        progress: Stream for progress lines (default stderr).
        **options: ``trials``, ``steps``, ``group_by``, ``dtypes``, ``study_name``,
            ``out``, ``sampler``, ``tolerance``, ... (see :class:`SearchOptions`).

    Returns:
        A :class:`SearchResult` with ``.trials``, ``.pareto``, ``.best_policy``,
        ``.reference`` and ``.export(dir)``.
    """
    from precsearch.loaders import spec_from_callables

    known = set(SearchOptions.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise UserInputError(
            f"search() got unknown option {unknown[0]!r}; known: {', '.join(sorted(known))}"
        )
    if callable(model) and not isinstance(model, (str, os.PathLike)):
        if train_data is None:
            raise UserInputError("search(build_fn) needs train_data (examples or a function)")
        model = spec_from_callables(model, train_data, val_data, compile_kwargs)
    elif train_data is not None or val_data is not None:
        raise UserInputError(
            "train_data/val_data go with a build function; a model file defines its own"
        )
    run = run_study(model, SearchOptions(**options), progress=progress)
    notes = [*run.notes, *([run.verdict] if run.verdict else [])]
    return SearchResult(run.study, run.study_dir, notes)
