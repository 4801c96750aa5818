"""A study from start to end: the body of ``precsearch run`` and ``precsearch.search``.

:func:`run_study` follows the data flow of DESIGN.md, one step per module:

1. the model file is inspected in a worker process (:mod:`precsearch.worker`), which
   answers with the model's :class:`~precsearch.records.ModelInfo`;
2. the search space is built from it (:mod:`precsearch.space`) and the study opened or
   resumed in its storage (:mod:`precsearch.storage`), FP32 and the global recipe
   enqueued first;
3. Optuna drives the trials (:mod:`precsearch.optimize`), each run in the worker;
4. the best candidates are re-measured and the answer chosen (:mod:`precsearch.confirm`);
5. exporters write the answer (:mod:`precsearch.export` and the exporter plugins);
   trials.csv, TensorBoard runs (:mod:`precsearch.tensorboard_logs`) and report.html
   (:mod:`precsearch.html_report`) are written whatever happened.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precsearch.confirm import confirm
from precsearch.errors import TrialFailed, UserInputError, one_line
from precsearch.export import best_policy_with_manifest, write_trials_csv
from precsearch.hardware import describe_fingerprint, fingerprint
from precsearch.html_report import write_report
from precsearch.optimize import make_objective, make_sampler, search_trials, worker_seed
from precsearch.options import DEFAULT_EXPORTERS, SearchOptions, check_study_name
from precsearch.plugins import create, get
from precsearch.records import Fidelity, ModelInfo, ModelSpec, SpaceOptions, TrialResult, Winner
from precsearch.space import SearchSpace
from precsearch.storage import (
    SharedReferences,
    create_or_load,
    fail_stale_trials,
    find_study,
    open_storage,
    redact,
)
from precsearch.tensorboard_logs import TensorBoardLog

__all__ = ["StudyRun", "default_study_name", "export_winner", "run_study", "worker_options"]


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


def _open_search(
    name: str,
    storage: Any,
    space: SearchSpace,
    info: ModelInfo,
    options: SearchOptions,
    objectives: list[Any],
    model_file: str,
) -> tuple[Any, bool]:
    """``(study, created)``: create the study, or join it if it was made with the same
    search space on the same kind of hardware.

    Raises:
        UserInputError: Another search space, or other hardware: speed figures measured
            on different machines do not compare.
    """
    budget = options.budget()
    sampler = make_sampler(options.sampler, space, options.seed, options.trials)
    described = {**space.describe(), "objectives": [o.name for o in objectives]}
    directions = [o.direction for o in objectives if o.direction]
    study, created = create_or_load(name, storage, sampler, directions)
    here = fingerprint(info.gpus)
    if created or study.user_attrs.get("space") is None:
        study.set_user_attr("space", described)
        study.set_user_attr("model_file", model_file)
        study.set_user_attr("loader", options.loader)
        study.set_user_attr("budget", budget.to_dict())
        study.set_user_attr("tolerance", float(options.tolerance))
        study.set_user_attr("model_info", info.to_dict())
        study.set_user_attr("options", {**options.shared(), "dtypes": space.dtypes})
        study.set_user_attr("hardware", here)
        return study, created
    stored = study.user_attrs["space"]
    if stored != described:
        changed = sorted(k for k in described if stored.get(k) != described[k])
        raise UserInputError(
            f"study {name!r} was created with another search space (differs in "
            f"{', '.join(changed)}); resume it with the same options or pick a new "
            "--study-name"
        )
    theirs = study.user_attrs.get("hardware")
    if theirs is not None and theirs != here:
        raise UserInputError(
            f"study {name!r} measures speed on {describe_fingerprint(theirs)}; this machine "
            f"is {describe_fingerprint(here)}: its figures would not compare. Run a study "
            "per kind of machine (another --study-name)"
        )
    if study.user_attrs.get("budget") != budget.to_dict():
        warnings.warn(
            f"study {name!r} was run with budget {study.user_attrs.get('budget')}; "
            f"this run uses {budget.to_dict()}: their trials are not comparable",
            stacklevel=3,
        )
    return study, created


def _executor(
    spec: ModelSpec | None, model_path: Path | None, work_dir: Path, options: SearchOptions
) -> Any:
    from precsearch.guard import InProcess
    from precsearch.worker import Worker

    budget = options.budget()
    fidelity = Fidelity(tolerance=float(options.tolerance))
    env = dict(options.env)
    if options.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(options.gpu)  # this worker sees one GPU
    if options.in_process:
        spec = spec or create("loader", options.loader).load(model_path)
        return InProcess(spec, work_dir, budget, fidelity, options.batch_size, options.strategy)
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
    )


def run_study(
    model: str | os.PathLike[str] | ModelSpec,
    options: SearchOptions,
    progress: Any = None,
    executor: Any = None,
) -> StudyRun:
    """Run (or resume) a study (see the module doc).

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
    from optuna.trial import TrialState

    t_start = time.perf_counter()
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
            stacklevel=2,
        )
        options.in_process = True
    name = options.study_name or default_study_name(
        model_path or Path(spec.source.strip("<>").split()[-1].split(".")[-1])
    )
    study_dir = Path(options.out) / name
    budget = options.budget()
    storage = open_storage(options.storage, study_dir, options.heartbeat)
    paths = {
        "study folder": study_dir,
        "storage": redact(options.storage) if options.storage else study_dir / "study.journal",
    }

    own_executor = executor is None
    if executor is None:
        executor = _executor(spec, model_path, study_dir / "work", options)
    verdict = failure = ""
    try:
        executor.start()
        info = executor.model_info
        space = SearchSpace(
            info.to_dict(),
            SpaceOptions(group_by=options.group_by, dtypes=options.dtypes, lr_rule=options.lr_rule),
            options.dimensions,
        )
        study, created = _open_search(
            name,
            storage,
            space,
            info,
            options,
            objectives,
            model_file=str(model_path) if model_path else spec.source,
        )
        share = SharedReferences(study, study_dir / "work")
        share.download()
        logs = TensorBoardLog(study_dir / "tensorboard")
        journal = options.storage is None or "://" not in options.storage
        stale = fail_stale_trials(study, journal=journal)
        notes = list(space.options.notes)
        if stale:
            notes.append(f"marked trials {stale} failed: their run was killed")
        if created:  # only the process that created the study: creators may race
            for label, params in space.baselines():
                study.enqueue_trial(params, user_attrs={"baseline": label}, skip_if_exists=True)
        before = {
            t.number for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING
        }

        notes += search_trials(
            study,
            make_objective(space, executor, budget, objectives, options.seed),
            options,
            space,
            progress,
            [share, logs],
        )

        if options.confirm_top > 0:
            try:
                record = confirm(
                    study, executor, budget, options.confirm_top, options.rounds,
                    max(10, budget.block),
                )  # fmt: skip
                verdict = record.verdict

                def model_exports(policy: Any, names: list[str]) -> list[str]:
                    return executor.export(policy, names, study_dir)["paths"]

                paths.update(export_winner(study, study_dir, exporters, model_exports))
            except (TrialFailed, OSError) as exc:
                failure = f"confirmation or export failed ({one_line(exc)})"
    finally:
        if own_executor:
            executor.close()
    try:
        paths["trials.csv"] = write_trials_csv(study, study_dir / "trials.csv")
        paths["tensorboard"] = logs.write_all(study)  # earlier trials too, on a resume
        paths["report.html"] = write_report(study, study_dir / "report.html")
    except OSError as exc:
        failure = failure or f"writing the study's files failed ({one_line(exc)})"
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
        failure=failure,
    )


def worker_options(
    name: str,
    storage: str,
    out: str = "studies",
    trials: int | None = None,
    timeout: float | None = None,
    model_file: str | None = None,
    gpu: int | None = None,
    confirm_top: int = 0,
    rounds: int = 5,
) -> tuple[str, SearchOptions]:
    """The model file and options for one more process on an existing shared study.

    Everything that defines the study comes from the study itself. A worker runs trials
    only (``confirm_top=0``); ``precsearch finish`` runs none and confirms. The sampler
    seed is drawn from host, process and time (:func:`worker_seed`), so that workers do
    not propose the same trials.

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
        seed=worker_seed(),
        confirm_top=confirm_top,
        rounds=rounds,
        gpu=gpu,
    )
    return path, options
