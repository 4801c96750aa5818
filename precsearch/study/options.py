"""What ``precsearch run`` (and ``precsearch.search``) is asked to do.

:class:`SearchOptions` holds every option of a run; ``None`` means the model file's
``precsearch_config``, else the default (:meth:`SearchOptions.resolved`). The options
that define a study, and that every worker of a shared study must run the same way,
are stored in the study (:meth:`SearchOptions.shared`).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precsearch.errors import UserInputError
from precsearch.records import Budget, parse_dtypes
from precsearch.study.storage import find_study

__all__ = [
    "DEFAULT_EXPORTERS",
    "SAMPLERS",
    "SearchOptions",
    "check_study_name",
    "stored_options",
    "worker_options",
    "worker_seed",
]

SAMPLERS = ("tpe", "nsga2", "random", "grid")
DEFAULT_EXPORTERS = ("policy_json", "saved_model", "trials_csv")
STUDY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def check_study_name(name: str) -> str:
    """``name`` if it is one safe folder name; a study's files go to ``<out>/<name>/``.

    Raises:
        UserInputError: A path (``../x``, ``a/b``), an empty or hidden name, or other
            characters than letters, digits, ``_``, ``.`` and ``-``.
    """
    if not isinstance(name, str) or not STUDY_NAME.fullmatch(name):
        raise UserInputError(
            f"study name {name!r}: expected one folder name of letters, digits, _ . - "
            "(at most 100, not starting with . or -), not a path"
        )
    return name


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
    casts: str = "follow"
    sensitive: bool = False  # with casts="follow": softmax layers get a dtype choice too
    dtypes: str | list[str] | None = None
    steps: int | None = None
    tolerance: float | None = None
    sampler: str = "tpe"
    in_process: bool = False
    seed: int = 0
    lr_rule: str = "auto"
    batch_size: int | None = None
    confirm_top: int = 3
    confirm_time: float = 60.0
    # Most seconds of the probes' timed rounds; 0: no probes; None: $PRECSEARCH_PROBE_TIME
    # or 30.
    probe_time: float | None = None
    watchdog: float | None = None
    keep_slow: bool = False
    dimensions: list[str] | None = None
    objectives: list[str] = field(default_factory=list)
    exporters: list[str] = field(default_factory=list)
    loader: str = "model_file"
    env: dict[str, str] = field(default_factory=dict)
    heartbeat: int = 60
    gpu: int | None = None
    strategy: str = "none"
    debug: bool = False  # the worker's output, TensorFlow's logs included, on stderr

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
        if not filled.confirm_time > 0:
            raise UserInputError(
                f"--confirm-time {filled.confirm_time}: expected a positive number of seconds"
            )
        if filled.probe_time is None:
            text = os.environ.get("PRECSEARCH_PROBE_TIME", "30")
            try:
                filled.probe_time = float(text)
            except ValueError:
                raise UserInputError(
                    f"PRECSEARCH_PROBE_TIME={text!r}: expected a number of seconds"
                ) from None
        if not filled.probe_time >= 0:
            raise UserInputError(
                f"--probe-time {filled.probe_time}: expected 0 (no probes) or more seconds"
            )
        if filled.steps is not None and filled.steps < 1:
            raise UserInputError(f"--steps {filled.steps}: expected a positive integer")
        if filled.gpu is not None and filled.in_process:
            raise UserInputError("--gpu pins a worker process: it cannot go with --in-process")
        if filled.study_name is not None:
            check_study_name(filled.study_name)
        if filled.dtypes is not None:
            parse_dtypes(filled.dtypes)  # a typo fails now, not after the model is built
        filled.budget()  # so does a budget that cannot time one block
        return filled

    def shared(self) -> dict[str, Any]:
        """What every worker of a study must run the same way, and what ``precsearch
        finish`` exports (stored in the study)."""
        keys = (
            "group_by", "casts", "sensitive", "dtypes", "steps", "tolerance", "sampler",
            "lr_rule", "batch_size", "watchdog", "keep_slow", "dimensions", "objectives",
            "exporters", "loader", "trial_timeout", "heartbeat", "strategy",
        )  # fmt: skip
        return {key: getattr(self, key) for key in keys}

    def budget(self) -> Budget:
        """The trial budget these options ask for."""
        changes: dict[str, Any] = {}
        if self.steps:
            changes["steps"] = self.steps
        if self.watchdog:
            changes["watchdog"] = self.watchdog
        if self.keep_slow:
            changes["stop_slow"] = False
        return Budget(**changes)


def worker_seed() -> int:
    """A sampler seed for one more worker of a shared study.

    From host, process id and time together: process ids alone repeat across machines
    (in containers every worker can be pid 1 or 7), and equal seeds make workers propose
    the same trials.
    """
    text = f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def stored_options(study: Any, **changes: Any) -> SearchOptions:
    """A study's own options (those every process of it must share), with ``changes``.

    Raises:
        UserInputError: A study made by a precsearch that did not store them.
    """
    shared = study.user_attrs.get("options")
    if shared is None:
        raise UserInputError(
            f"study {study.study_name!r} has no stored options (made by an older precsearch): "
            "join it with `precsearch run` and the same options instead"
        )
    return SearchOptions(**{**shared, "study_name": study.study_name, **changes})


def worker_options(
    name: str,
    storage: str,
    out: str = "studies",
    trials: int | None = None,
    timeout: float | None = None,
    model_file: str | None = None,
    gpu: int | None = None,
    confirm_top: int = 0,
    confirm_time: float = 60.0,
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
    path = model_file or study.user_attrs.get("model_file", "")
    options = stored_options(
        study, trials=trials, timeout=timeout, storage=storage, out=out, seed=worker_seed(),
        confirm_top=confirm_top, confirm_time=confirm_time, gpu=gpu,
    )  # fmt: skip
    if not Path(path).is_file():
        raise UserInputError(
            f"{path}: the study's model file is not on this machine (pass --model-file)"
        )
    return path, options
