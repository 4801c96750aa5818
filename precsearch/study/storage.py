"""Where a study lives: an Optuna storage, and the studies and trials in it.

Default: an Optuna journal file ``<out>/<study>/study.journal`` (no server). For many
machines: any Optuna RDB URL (PostgreSQL in practice), with heartbeats so that Optuna
fails the trials of a dead worker. :func:`fail_stale_trials` does the same for the
journal, by host and process id, when a killed run is resumed.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import warnings
from pathlib import Path
from typing import Any

from precsearch.errors import UserInputError, causes, missing_module, one_line
from precsearch.files import write_text_atomic
from precsearch.stored import store_reference, stored_references, worker_of

__all__ = [
    "fail_stale_trials",
    "find_study",
    "open_storage",
    "SharedReferences",
    "create_or_load",
    "open_study",
    "redact",
    "storage_failure",
]

PASSWORD = re.compile(r"(://[^/:@\s]*:)[^/\s]*@")
STARTING_GRACE_S = 60.0  # a trial records its host within milliseconds of starting


def open_storage(storage: str | None, study_dir: Path, heartbeat: int = 60) -> Any:
    """An Optuna storage: a journal file by default, an RDB URL with heartbeats.

    On an RDB storage every running trial beats every ``heartbeat`` seconds; one silent
    for five beats (its worker died, even by ``kill -9``) is failed by the next worker
    to start a trial, and retried once (Optuna's ``RetryHeartbeatStaleTrialCallback``).
    Connections are checked before use, so a server that restarts is found again.
    """
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    if storage is None or "://" not in storage:
        path = Path(storage) if storage else study_dir / "study.journal"
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                storage,
                engine_kwargs={"pool_pre_ping": True},
                heartbeat_interval=heartbeat,
                grace_period=5 * heartbeat,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                    max_retry=1
                ),
            )
    except ModuleNotFoundError as exc:
        raise missing_module(exc, f"--storage {redact(storage)}") from None
    except (SQLAlchemyError, optuna.exceptions.OptunaError, ValueError, OSError) as exc:
        raise UserInputError(
            f"--storage {redact(storage)}: cannot open ({redact(one_line(exc))})"
        ) from None


def storage_failure(exc: BaseException) -> BaseException | None:
    """The storage's own error behind ``exc``, if a storage failure caused it: a
    database error, or an OS error of the journal file."""
    from sqlalchemy.exc import SQLAlchemyError

    return next((e for e in causes(exc) if isinstance(e, (SQLAlchemyError, OSError))), None)


def redact(text: str) -> str:
    """``text`` with the password of any URL in it replaced by ``***``: storage URLs
    carry passwords, and none may reach a log, a report or a file."""
    return PASSWORD.sub(r"\1***@", str(text))


def open_study(
    name: str, storage: Any, sampler: Any = None, directions: list[str] | None = None
) -> Any:
    """Create or resume the study ``name`` (speedup up, fidelity gap down by default)."""
    return create_or_load(name, storage, sampler, directions)[0]


def create_or_load(
    name: str, storage: Any, sampler: Any = None, directions: list[str] | None = None
) -> tuple[Any, bool]:
    """``(study, created)``: the study ``name``, and whether this call created it.

    Creation is atomic in the storage (a unique study name), so of several processes
    racing to create one study exactly one is told ``created``: the one that sets it up.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            sampler=sampler,
            directions=directions or ["maximize", "minimize"],
        )
        return study, True
    except optuna.exceptions.DuplicatedStudyError:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler), False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_stale_trials(study: Any, journal: bool, grace: float = STARTING_GRACE_S) -> list[int]:
    """Mark FAIL the RUNNING trials of a run that was killed; return their numbers.

    A trial records its host and pid as soon as it starts: one from this host whose
    process is gone is stale. With the (single-machine) journal, a RUNNING trial that
    has not recorded them is stale once it is older than ``grace`` seconds (younger, it
    may belong to a live process that is just starting it); RDB storages leave the rest
    to Optuna's heartbeats. A trial that finishes meanwhile is left alone.
    """
    from optuna.trial import TrialState

    host = socket.gethostname()
    now = datetime.datetime.now()
    failed = []
    storage = study._storage
    retry = getattr(storage, "get_heartbeat_stale_trial_callback", lambda: None)()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner, pid = worker_of(trial)
        if owner is None:
            started = trial.datetime_start
            if not journal or started is None or (now - started).total_seconds() < grace:
                continue
        elif owner != host or pid is None or _pid_alive(pid):
            continue
        try:
            storage.set_trial_user_attr(trial._trial_id, "status", "failed")
            storage.set_trial_user_attr(
                trial._trial_id, "reason", "interrupted: its run was killed"
            )
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        except RuntimeError:
            continue  # it finished meanwhile: Optuna refuses to change a finished trial
        # The journal drops, rather than refuses, a change to a trial finished meanwhile.
        if storage.get_trial(trial._trial_id).state == TrialState.FAIL:
            failed.append(trial.number)
            if retry is not None:  # as if its heartbeat had stopped: retried the same way
                retry(study, storage.get_trial(trial._trial_id))
    return failed


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


class SharedReferences:
    """FP32 reference runs kept in the study's storage, so that a worker on another
    machine reads them instead of training them again.

    The runs are cached as files in each machine's work folder (keyed on the model
    file's fingerprint, batch size, LR rule, XLA and length); after each trial the new
    files go into the study's user attrs, and a joining worker writes those into its
    folder before its first trial.
    """

    def __init__(self, study: Any, work_dir: Path) -> None:
        self.study = study
        self.work_dir = Path(work_dir)
        self._stored: set[str] = set()

    def download(self) -> int:
        """Write the study's stored runs into the work folder; return how many."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        count = 0
        for name, value in stored_references(self.study).items():
            self._stored.add(name)
            path = self.work_dir / name
            if not path.exists():
                write_text_atomic(path, json.dumps(value))
                count += 1
        return count

    def upload(self) -> None:
        """Store the work folder's runs that the study does not have yet."""
        for path in sorted(self.work_dir.glob("reference_*.json")):
            if path.name not in self._stored:
                store_reference(self.study, path.name, json.loads(path.read_text()))
                self._stored.add(path.name)

    def __call__(self, study: Any, trial: Any) -> None:
        self.upload()
