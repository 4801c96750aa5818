"""What ``precsearch run`` (and ``precsearch.search``) is asked to do.

:class:`SearchOptions` holds every option of a run; ``None`` means the model file's
``precsearch_config``, else the default (:meth:`SearchOptions.resolved`). The options
that define a study, and that every worker of a shared study must run the same way,
are stored in the study (:meth:`SearchOptions.shared`).

Each field is the one definition of its option: its default, and its command-line
:class:`~precsearch.study.flags.Flag` (flag, help, converter, choices), from which
:mod:`precsearch.cli.parser` builds the parser. A field without a flag says why
(:func:`flagless`).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

from precsearch.errors import UserInputError
from precsearch.records import CASTS, GROUP_BY, Budget, parse_dtypes
from precsearch.stored import study_record
from precsearch.study.flags import (
    FLAG,
    NO_FLAG,
    Flag,
    at_least,
    count,
    option,
    positive_float,
    positive_int,
    seconds,
)
from precsearch.study.storage import find_study

__all__ = [
    "DEFAULT_EXPORTERS",
    "SAMPLERS",
    "SearchOptions",
    "check_study_name",
    "flagless",
    "option_flags",
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
    ``precsearch_config``, else the default).

    In the order of ``precsearch run --help``; each field is its option's one definition.
    """

    trials: int | None = option(
        None, "--trials", count,
        help="trials to run now (default 16; 0: only confirm and export, say after workers "
        "on other machines)",
    )  # fmt: skip
    timeout: float | None = option(
        None, "--timeout", positive_float, help="stop starting trials after SEC"
    )
    trial_timeout: float = option(
        1800.0, "--trial-timeout", positive_float, help="kill a trial after SEC"
    )
    study_name: str | None = option(
        None, "--study-name", help="default: the model file's folder or name"
    )
    storage: str | None = option(
        None, "--storage", help="an Optuna storage URL (default: a journal file)"
    )
    out: str = option("studies", "--out", help="folder of study folders")
    group_by: str | None = option(None, "--group-by", choices=GROUP_BY)
    casts: str = option(
        "follow", "--casts", choices=CASTS,
        help="follow (default): only layers that compute get a dtype choice, shape and "
        "element-wise layers take their input's; independent: every layer gets one",
    )  # fmt: skip
    sensitive: bool = option(
        False, "--sensitive",
        help="with --casts follow, offer softmax layers a low dtype too (float32 by default)",
    )  # fmt: skip
    dtypes: str | list[str] | None = option(
        None, "--dtypes", help="e.g. float32,bfloat16 (default: what runs fast here)"
    )
    steps: int | None = option(None, "--steps", positive_int, help="training steps per trial")
    tolerance: float | None = option(
        None, "--tolerance", positive_float, help="largest fidelity gap (the test's bar: 1)"
    )
    fp32_runs: int = option(
        Budget.ref_seeds, "--fp32-runs", partial(at_least, least=3), metavar="N",
        help="FP32 runs the quality test judges trials against (at least 3, default "
        "%(default)s); with fewer, each trial trains more runs of its own for the same power "
        "(4 at 12, 5 at 8, with three figures judging); at 5 or fewer it keeps 3 and the "
        "test weakens (2 noise units worse on one of 3 figures: caught 83%% with 12, 21%% "
        "with 3)",
    )  # fmt: skip
    sampler: str = option("tpe", "--sampler", choices=SAMPLERS)
    lr_rule: str = option(
        "auto", "--lr-rule", choices=("auto", "linear", "sqrt", "none"),
        help="how the learning rate follows the batch size (default auto: square root for "
        "Adam-family optimizers, linear for SGD)",
    )  # fmt: skip
    batch_size: int | None = option(
        None, "--batch-size", positive_int, help="the model's own batch size"
    )
    in_process: bool = option(False, "--in-process", help="run trials here (no crash isolation)")
    seed: int = option(0, "--seed", int, help="sampler seed")
    heartbeat: int = option(
        60, "--heartbeat", positive_int, metavar="SEC",
        help="on a shared storage: a trial beats every SEC s; one silent 5 beats is failed "
        "and retried once (default 60)",
    )  # fmt: skip
    gpu: int | None = option(None, "--gpu", count, metavar="I", help="run trials on GPU I only")
    strategy: str = option(
        "none", "--strategy", choices=("none", "mirrored"),
        help="mirrored: train each trial data-parallel over the visible GPUs",
    )  # fmt: skip
    block_time: float | None = option(
        None, "--block-time", positive_float, metavar="S",
        help="least seconds of one timed block, in trials, probes and the confirmation "
        "(default 0.5, or $PRECSEARCH_BLOCK_TIME): shorter is faster and noisier; longer "
        "for a noisy machine",
    )  # fmt: skip
    confirm_top: int = option(
        3, "--confirm", count, metavar="N", help="re-measure the top N (0: skip)"
    )
    confirm_time: float = option(
        60.0, "--confirm-time", positive_float, metavar="S",
        help="most seconds of timed rounds for the selection, and again for the fresh "
        "rounds (default 60; at least 5 rounds each)",
    )  # fmt: skip
    probe_time: float | None = option(
        None, "--probe-time", seconds, metavar="S",
        help="most seconds of timed rounds for the probes before the search: each layer "
        "group alone in low precision against FP32 (default 30, or $PRECSEARCH_PROBE_TIME; "
        "0: no probes)",
    )  # fmt: skip
    watchdog: float | None = option(
        None, "--watchdog", positive_float, metavar="X",
        help="stop a trial whose first step is X times slower than FP32's (default 5)",
    )  # fmt: skip
    keep_slow: bool = option(
        False, "--keep-slow",
        help="train trials that are confidently slower than FP32 (or than the best "
        "feasible trial) to the end of their budget (to see how they train) instead of "
        "stopping them as too slow",
    )  # fmt: skip
    dimensions: list[str] | None = option(
        None, "--dimension", metavar="NAME[=ARG]", repeat=True,
        help="search dimensions (repeatable; replaces the default layer_dtypes, loss_scale, "
        "batch_size, jit_compile)",
    )  # fmt: skip
    objectives: list[str] = option(
        [], "--objective", metavar="NAME[=ARG]", repeat=True,
        help="an extra objective or constraint beside speedup and fidelity (repeatable)",
    )  # fmt: skip
    exporters: list[str] = option(
        [], "--export", metavar="NAME[=ARG]", repeat=True,
        help="an extra exporter beside policy_json, saved_model, trials_csv (repeatable)",
    )  # fmt: skip
    loader: str = option(
        "model_file", "--loader", metavar="NAME[=ARG]",
        help="how MODEL_FILE is read (default model_file; see precsearch plugins)",
    )  # fmt: skip
    # This process's, never stored in the study: the worker's output on stderr.
    debug: bool = option(
        False, "--debug",
        help="show the trial worker's output, TensorFlow's logs included, and an error's "
        "traceback",
    )  # fmt: skip
    env: dict[str, str] = field(
        default_factory=dict,
        metadata={
            NO_FLAG: "extra environment variables for the worker process: a notebook's "
            "(search(env=...)); a shell sets its own environment, which the worker inherits"
        },
    )

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
            filled.probe_time = _env_seconds("PRECSEARCH_PROBE_TIME", 30.0)
        if filled.block_time is None:
            filled.block_time = _env_seconds("PRECSEARCH_BLOCK_TIME", Budget.block_time)
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
            "group_by", "casts", "sensitive", "dtypes", "steps", "tolerance", "fp32_runs",
            "block_time", "sampler", "lr_rule", "batch_size", "watchdog", "keep_slow",
            "dimensions", "objectives", "exporters", "loader", "trial_timeout", "heartbeat",
            "strategy",
        )  # fmt: skip
        return {key: getattr(self, key) for key in keys}

    def budget(self) -> Budget:
        """The trial budget these options ask for."""
        changes: dict[str, Any] = {"ref_seeds": self.fp32_runs}
        if self.block_time is not None:
            changes["block_time"] = self.block_time
        if self.steps:
            changes["steps"] = self.steps
        if self.watchdog:
            changes["watchdog"] = self.watchdog
        if self.keep_slow:
            changes["stop_slow"] = False
        return Budget(**changes)


def _env_seconds(name: str, default: float) -> float:
    """The seconds an environment variable gives an option's default (``default``
    where unset); else one line saying what was expected."""
    text = os.environ.get(name, str(default))
    try:
        return float(text)
    except ValueError:
        raise UserInputError(f"{name}={text!r}: expected a number of seconds") from None


def option_flags() -> dict[str, Flag]:
    """The :class:`Flag` of each :class:`SearchOptions` field that has one, by field
    name, in the order of ``precsearch run --help``."""
    return {f.name: f.metadata[FLAG] for f in fields(SearchOptions) if FLAG in f.metadata}


def flagless() -> dict[str, str]:
    """Why each :class:`SearchOptions` field without a flag has none (``""``: no reason
    given), by field name."""
    return {
        f.name: f.metadata.get(NO_FLAG, "") for f in fields(SearchOptions) if FLAG not in f.metadata
    }


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
    shared = study_record(study, "options")
    if shared is None:
        raise UserInputError(
            f"study {study.study_name!r} has no stored options (made by an older precsearch): "
            "join it with `precsearch run` and the same options instead"
        )
    return SearchOptions(**{**shared, "study_name": study.study_name, **changes})


def worker_options(
    name: str, storage: str, out: str = "studies", trials: int | None = None,
    timeout: float | None = None, model_file: str | None = None, gpu: int | None = None,
    confirm_top: int = 0, confirm_time: float = 60.0,
) -> tuple[str, SearchOptions]:  # fmt: skip
    """The model file and options for one more process on an existing shared study.

    Everything that defines the study comes from the study itself. A worker runs trials
    only (``confirm_top=0``); ``precsearch finish`` runs none and confirms. The sampler
    seed is drawn from host, process and time (:func:`worker_seed`), so that workers do
    not propose the same trials.

    Raises:
        UserInputError: No such study, one made before workers existed, or no model file.
    """
    study, _ = find_study(name, storage, out)
    path = model_file or study_record(study, "model_file") or ""
    options = stored_options(
        study, trials=trials, timeout=timeout, storage=storage, out=out, seed=worker_seed(),
        confirm_top=confirm_top, confirm_time=confirm_time, gpu=gpu,
    )  # fmt: skip
    if not Path(path).is_file():
        raise UserInputError(
            f"{path}: the study's model file is not on this machine (pass --model-file)"
        )
    return path, options
