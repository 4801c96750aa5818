"""A study from start to end: the body of ``precsearch run`` and ``precsearch.search``.

:func:`run_study` follows the data flow of ARCHITECTURE.md, one step per module:

1. the model is inspected by an executor (:mod:`precsearch.study.executors`: a worker
   process by default), which answers with the model's
   :class:`~precsearch.records.ModelInfo`;
2. the search space is built from it (:mod:`precsearch.study.space`) and the study
   opened or resumed in its storage (:mod:`precsearch.study.storage`), FP32 and the
   global recipe enqueued first;
   the probes measure each layer group alone in low precision
   (:mod:`precsearch.study.probe`) and the predicted-best policy is enqueued;
3. Optuna drives the trials (:mod:`precsearch.study.optimize`), each run by the executor;
4. the best candidates are re-measured and the answer chosen
   (:mod:`precsearch.study.confirm`);
5. exporters write the answer (:mod:`precsearch.results.export` and the exporter
   plugins); trials.csv, TensorBoard runs (:mod:`precsearch.results.tensorboard_logs`)
   and report.html (:mod:`precsearch.results.html_report`) are written whatever
   happened before them.
"""

from __future__ import annotations

import os
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precsearch.app.files import export_winner, write_study_files
from precsearch.errors import TrialFailed, UserInputError, one_line
from precsearch.hardware import describe_fingerprint, fingerprint
from precsearch.plugins import create, get
from precsearch.records import (
    Budget,
    Fidelity,
    ModelInfo,
    ModelSpec,
    SpaceOptions,
    TrialResult,
)
from precsearch.results.tensorboard_logs import TensorBoardLog
from precsearch.stored import (
    enqueue_baseline,
    record_confirmation,
    results_that_ran,
    set_study_record,
    study_record,
)
from precsearch.study.confirm import confirm
from precsearch.study.executors import Executor, InProcess, Worker
from precsearch.study.optimize import make_objective, make_sampler, search_trials
from precsearch.study.options import DEFAULT_EXPORTERS, SearchOptions, check_study_name
from precsearch.study.probe import probe_study
from precsearch.study.space import SearchSpace
from precsearch.study.storage import (
    SharedReferences,
    create_or_load,
    fail_stale_trials,
    open_storage,
    redact,
)

__all__ = [
    "StudyRun",
    "default_study_name",
    "export_winner",
    "make_executor",
    "prepare_run",
    "run_study",
    "space_for",
]


# The objectives' names in Optuna (a plugin objective keeps its own).
METRIC_NAMES = {"speedup": "speedup", "fidelity": "fidelity_gap"}


def default_study_name(model_file: Path) -> str:
    """``studies/wide_mlp/model.py`` → ``wide_mlp``; ``my net.py`` → ``my_net``."""
    name = model_file.parent.name if model_file.stem == "model" else model_file.stem
    return check_study_name(re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".-")[:100] or "study")


@dataclass
class StudyRun:
    """What one ``run_study`` call did; ``failure`` says what went wrong after the trials
    (confirmation or export), which leaves the study and its trials intact."""

    study: Any
    space: SearchSpace
    study_dir: Path
    paths: dict[str, Path | str]
    results: list[TrialResult]
    seconds: float
    notes: list[str]
    verdict: str = ""
    failure: str = ""


@dataclass
class _Run:
    """What the steps of one run share."""

    options: SearchOptions
    budget: Budget
    objectives: list[Any]
    exporters: list[str]
    spec: ModelSpec | None
    model_path: Path | None
    study_dir: Path
    paths: dict[str, Path | str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        return str(self.model_path) if self.model_path else self.spec.source


def make_executor(
    options: SearchOptions,
    work_dir: Path,
    model_path: Path | None = None,
    spec: ModelSpec | None = None,
) -> Executor:
    """The executor a run's options ask for: a worker process for a model file, or this
    process (``in_process``, and always for a spec of callables)."""
    budget = options.budget()
    fidelity = Fidelity(tolerance=float(options.tolerance or 1.0))
    if options.in_process or spec is not None:
        spec = spec or create("loader", options.loader).load(model_path)
        return InProcess(spec, work_dir, budget, fidelity, options.batch_size, options.strategy)
    env = dict(options.env)
    if options.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(options.gpu)  # this worker sees one GPU
    return Worker(
        model_path,
        work_dir,
        budget,
        fidelity,
        options.batch_size,
        trial_timeout=options.trial_timeout,
        env=env,
        loader=options.loader,
        strategy=options.strategy,
        debug=options.debug,
    )


def prepare_run(model: str | os.PathLike[str] | ModelSpec, options: SearchOptions) -> _Run:
    """The run's options resolved, its plugins checked and its folder named, before any
    model is built: every mistake here is the user's, and cheap to find."""
    spec = model if isinstance(model, ModelSpec) else None
    model_path = None if spec is not None else Path(model).resolve()
    config = (
        spec.config if spec is not None else create("loader", options.loader).config(model_path)
    )
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
            stacklevel=3,
        )
        options.in_process = True
    name = options.study_name or default_study_name(
        model_path or Path(spec.source.strip("<>").split()[-1].split(".")[-1])
    )
    study_dir = Path(options.out) / name
    options.study_name = name
    run = _Run(options, options.budget(), objectives, exporters, spec, model_path, study_dir)
    run.paths = {
        "study folder": study_dir,
        "storage": redact(options.storage) if options.storage else study_dir / "study.journal",
    }
    return run


def _open_search(run: _Run, storage: Any, space: SearchSpace, info: ModelInfo) -> tuple[Any, bool]:
    """``(study, created)``: create the study, or join it if it was made with the same
    search space on the same kind of hardware.

    Raises:
        UserInputError: Another search space, or other hardware: speed figures measured
            on different machines do not compare.
    """
    options, name = run.options, run.options.study_name
    sampler = make_sampler(options.sampler, space, options.seed, options.trials)
    described = {**space.describe(), "objectives": [o.name for o in run.objectives]}
    directions = [o.direction for o in run.objectives if o.direction]
    study, created = create_or_load(name, storage, sampler, directions)
    here = fingerprint(info.gpus)
    # What Optuna's own plots and optuna-dashboard label the objectives with (the API is
    # marked experimental in Optuna 5; its warning would only be noise here); a study
    # made before precsearch named them gets them when it resumes.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if created or study.metric_names is None:
            names = [METRIC_NAMES.get(o.name, o.name) for o in run.objectives if o.direction]
            study.set_metric_names(names)
    if created or study_record(study, "space") is None:
        records = {
            "space": described,
            "model_file": run.source,
            "loader": options.loader,
            "budget": run.budget.to_dict(),
            "tolerance": float(options.tolerance),
            "model_info": info,
            "options": {**options.shared(), "dtypes": space.dtypes},
            "hardware": here,
            "lr_rule": {"rule": space.options.lr_rule, "why": space.lr_rule_why},
        }
        for key, value in records.items():
            set_study_record(study, key, value)
        return study, created
    stored = study_record(study, "space")
    if stored != described:
        changed = sorted(k for k in described if stored.get(k) != described[k])
        raise UserInputError(
            f"study {name!r} was created with another search space (differs in "
            f"{', '.join(changed)}); resume it with the same options or pick a new "
            "--study-name"
        )
    theirs = study_record(study, "hardware")
    if theirs is not None and theirs != here:
        raise UserInputError(
            f"study {name!r} measures speed on {describe_fingerprint(theirs)}; this machine "
            f"is {describe_fingerprint(here)}: its figures would not compare. Run a study "
            "per kind of machine (another --study-name)"
        )
    if study_record(study, "budget") != run.budget.to_dict():
        warnings.warn(
            f"study {name!r} was run with budget {study_record(study, 'budget')}; "
            f"this run uses {run.budget.to_dict()}: their trials are not comparable",
            stacklevel=3,
        )
    return study, created


def _confirm_and_export(run: _Run, study: Any, executor: Executor) -> str:
    """The confirmation's verdict; the answer exported into the study folder."""
    options = run.options
    record = confirm(
        study, executor, run.budget, options.confirm_top, options.confirm_time,
        max(10, run.budget.block), seed=options.seed,
    )  # fmt: skip

    def model_exports(policy: Any, names: list[str]) -> list[str]:
        return executor.export(policy, names, run.study_dir)["paths"]

    start = time.perf_counter()
    run.paths.update(export_winner(study, run.study_dir, run.exporters, model_exports))
    record.seconds["export"] = time.perf_counter() - start
    record_confirmation(study, record)
    return record.verdict


def space_for(info: ModelInfo, options: SearchOptions) -> SearchSpace:
    """The search space the options give for the model."""
    space_options = SpaceOptions(
        group_by=options.group_by, casts=options.casts, sensitive=options.sensitive,
        dtypes=options.dtypes, lr_rule=options.lr_rule,
    )  # fmt: skip
    return SearchSpace(info.to_dict(), space_options, options.dimensions)


def _ready_study(
    run: _Run, storage: Any, space: SearchSpace, info: ModelInfo
) -> tuple[Any, SharedReferences]:
    """The study opened (or created, its baselines enqueued), the FP32 references other
    machines stored written here, the trials of a killed run failed; and the callback
    that shares this machine's references."""
    study, created = _open_search(run, storage, space, info)
    share = SharedReferences(study, run.study_dir / "work")
    share.download()
    journal = run.options.storage is None or "://" not in run.options.storage
    stale = fail_stale_trials(study, journal=journal)
    run.notes += [*space.options.notes, *info.notes()]
    if stale:
        run.notes.append(f"marked trials {stale} failed: their run was killed")
    if created:  # only the process that created the study: creators may race
        for label, params in space.baselines():
            enqueue_baseline(study, params, label)
    return study, share


def run_study(
    model: str | os.PathLike[str] | ModelSpec,
    options: SearchOptions,
    progress: Any = None,
    executor: Executor | None = None,
) -> StudyRun:
    """Run (or resume) a study (see the module doc).

    Args:
        model: A source for the loader (a model file's path by default), or a spec of
            callables (run in this process).
        options: The run's options.
        progress: A stream for progress lines (default stderr).
        executor: A ready executor (``Worker`` or ``InProcess``); by default one is made
            from the options (:func:`make_executor`).

    Raises:
        UserInputError: Bad options, a broken model file, an unknown plugin, or a study
            that was created with another search space.
    """
    from optuna.trial import TrialState

    t_start = time.perf_counter()
    run = prepare_run(model, options)
    options = run.options
    storage = open_storage(options.storage, run.study_dir, options.heartbeat)
    own_executor = executor is None
    if executor is None:
        executor = make_executor(options, run.study_dir / "work", run.model_path, run.spec)
    study = None
    logs = TensorBoardLog(run.study_dir / "tensorboard")
    verdict = failure = ""
    try:
        executor.start()
        space = space_for(executor.model_info, options)
        study, share = _ready_study(run, storage, space, executor.model_info)
        before = {
            t.number for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING
        }
        probes, said = probe_study(study, executor, space, options, run.budget.block, progress)
        run.notes += said
        objective = make_objective(
            space, executor, run.budget, run.objectives, options.seed, probes,
            say=lambda line: print(line, file=progress or sys.stderr, flush=True),
        )  # fmt: skip
        run.notes += search_trials(study, objective, options, space, progress, [share, logs])
        if options.confirm_top > 0:
            try:
                verdict = _confirm_and_export(run, study, executor)
            except (TrialFailed, OSError) as exc:
                failure = f"confirmation or export failed ({one_line(exc)})"
    finally:
        if own_executor:
            executor.close()
        if study is not None:
            # Whatever went wrong above, what the trials measured reaches the files.
            written = write_study_files(study, run.study_dir, run.paths, logs)
            failure = "; ".join(filter(None, [failure, written]))
    results = results_that_ran(
        t for t in study.get_trials(deepcopy=False) if t.number not in before
    )
    return StudyRun(
        study=study,
        space=space,
        study_dir=run.study_dir,
        paths=run.paths,
        results=results,
        seconds=time.perf_counter() - t_start,
        notes=run.notes,
        verdict=verdict,
        failure=failure,
    )
