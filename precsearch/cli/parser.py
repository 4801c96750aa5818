"""The ``precsearch`` command line: the parser, and one line for any error.

What each command does is in :mod:`precsearch.cli.commands`. TensorFlow is imported only by
commands that build or train a model, so ``precsearch --help`` answers at once.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import precsearch.cli.commands as commands
from precsearch._version import __version__
from precsearch.cli.commands import run_options
from precsearch.errors import PrecsearchError, UserInputError, one_line
from precsearch.study.flags import positive_float, positive_int
from precsearch.study.options import SearchOptions, option_flags

__all__ = ["build_parser", "main", "run_options"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like a UserInputError
        self.exit(2, f"precsearch: error: {message} (see precsearch --help)\n")


_FIELD: Any = object()  # the flag's default is its field's


def _argument_type(convert: Callable[[str], Any] | None) -> Callable[[str], Any] | None:
    """``convert`` for argparse: its ``ValueError`` becomes the flag's one-line error.

    A plain type (``int``) stays itself: argparse names it ("invalid int value").
    """
    if convert is None or isinstance(convert, type):
        return convert

    @functools.wraps(convert)
    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _add_option(
    cmd: argparse.ArgumentParser,
    name: str,
    default: Any = _FIELD,
    required: bool = False,
    **changes: Any,
) -> None:
    """The flag of the :class:`SearchOptions` field ``name``, made from its one definition.

    Its value goes to ``args.<name>``. ``default`` and ``changes`` (a :class:`Flag`'s
    ``help``, ``convert``, ...) are where this command's flag differs from ``run``'s.
    """
    flag = replace(option_flags()[name], **changes)
    own_default = getattr(SearchOptions(), name)
    kwargs: dict[str, Any] = {
        "dest": name,
        "default": own_default if default is _FIELD else default,
        "help": flag.help,
        "metavar": flag.metavar,
    }
    if required:
        kwargs["required"] = True
    if own_default is False:
        kwargs.update(action="store_true")
        del kwargs["metavar"]
    elif flag.repeat:
        kwargs.update(action="append")
    else:
        kwargs.update(type=_argument_type(flag.convert), choices=flag.choices)
    cmd.add_argument(flag.name, **kwargs)


def _debug(cmd: argparse.ArgumentParser) -> None:
    """``--debug`` after a command that starts workers, as well as before it."""
    # SUPPRESS: a command that is not given it keeps the value from before the command.
    _add_option(cmd, "debug", default=argparse.SUPPRESS)


def _shared_study(cmd: argparse.ArgumentParser, out_help: str | None = None) -> None:
    """The arguments that name a study on a shared storage and this machine's files."""
    cmd.add_argument("study", metavar="STUDY", help="the study's name")
    _add_option(cmd, "storage", required=True, help="the shared Optuna storage URL")
    cmd.add_argument("--model-file", help="the model file here (default: the study's path)")
    _add_option(cmd, "out", **({"help": out_help} if out_help else {}))


def _add_run(subparsers: Any) -> None:
    cmd = subparsers.add_parser(
        "run",
        help="search for the fastest policy that trains like FP32",
        description="Run (or resume) a study on MODEL_FILE, which defines build_model() "
        "and train_data() (see the README).",
    )
    cmd.add_argument("model_file", metavar="MODEL_FILE")
    for name in option_flags():
        if name == "debug":
            _debug(cmd)
        else:
            _add_option(cmd, name)
    cmd.set_defaults(func=commands.cmd_run)


def _add_study_readers(subparsers: Any) -> None:
    """``show``, ``export`` and ``report``: a study's folder, or its name and storage."""
    for name, text in (
        ("show", "print a study's Pareto front, confirmed figures and best policy"),
        ("export", "write a study's best policy, SavedModel and trials.csv into a folder"),
        ("report", "write a study's report.html (one file, opens offline) and TensorBoard logs"),
    ):
        cmd = subparsers.add_parser(name, help=text)
        cmd.add_argument("study", metavar="STUDY", help="a study folder, or a study name")
        _add_option(cmd, "storage", help="the Optuna storage URL of a named study")
        _add_option(cmd, "out")
        if name == "export":
            cmd.add_argument("--to", required=True, metavar="DIR", help="where to write")
            _add_option(cmd, "exporters", help="an extra exporter plugin (repeatable)")
        cmd.set_defaults(func=getattr(commands, f"cmd_{name}"))


def _add_worker(subparsers: Any) -> None:
    cmd = subparsers.add_parser(
        "worker",
        help="run trials of an existing study on a shared storage (one per machine)",
        description="Join a study that `precsearch run` created on a shared storage "
        "(PostgreSQL): run trials with the study's own options, no confirmation.",
    )
    _shared_study(cmd, "folder for this worker's work files")
    _add_option(cmd, "trials", convert=positive_int, help="trials to run (default 16)")
    _add_option(cmd, "timeout")
    _add_option(cmd, "gpu")
    _debug(cmd)
    cmd.set_defaults(func=commands.cmd_worker)


def _add_probe(subparsers: Any) -> None:
    cmd = subparsers.add_parser(
        "probe",
        help="measure each layer group alone in low precision against FP32 (what run "
        "does before its search), and print it",
    )
    cmd.add_argument("model_file", metavar="MODEL_FILE")
    _add_option(cmd, "group_by")
    _add_option(cmd, "casts", help=None)
    _add_option(cmd, "sensitive", help="softmax layers probed too")
    _add_option(cmd, "dtypes")
    _add_option(cmd, "batch_size")
    # Probes are what this command is for: 30 s here, not $PRECSEARCH_PROBE_TIME, nor 0.
    _add_option(
        cmd, "probe_time", default=30.0, convert=positive_float,
        help="most seconds of timed rounds (default 30)",
    )  # fmt: skip
    _add_option(cmd, "in_process", help="run here (no crash isolation)")
    cmd.add_argument("--json", action="store_true", help="the probes as JSON")
    _add_option(cmd, "loader", help=None)
    _debug(cmd)
    cmd.set_defaults(func=commands.cmd_probe)


def _add_doctor(subparsers: Any) -> None:
    cmd = subparsers.add_parser(
        "doctor",
        help="check a model and this machine for mixed-precision pitfalls before searching",
    )
    cmd.add_argument("model_file", metavar="MODEL_FILE")
    cmd.add_argument("--json", action="store_true", help="the report as JSON")
    _add_option(cmd, "batch_size")
    _add_option(cmd, "loader", help=None)
    cmd.set_defaults(func=commands.cmd_doctor)


def _add_train(subparsers: Any) -> None:
    cmd = subparsers.add_parser(
        "train",
        help="train a model for real under a policy file, guarded, and export it",
        description="Train MODEL_FILE under a policy (best_policy.json) with the numerics "
        "guard, checkpoints of the float32 master weights and a SavedModel export.",
    )
    cmd.add_argument("model_file", metavar="MODEL_FILE")
    cmd.add_argument("--policy", required=True, help="a policy file (best_policy.json)")
    # Not a search's options: how long the real training runs, and where its files go.
    positive = _argument_type(positive_int)
    length = cmd.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=positive, help="passes over the data (default 1)")
    length.add_argument("--steps", type=positive, help="training steps in all")
    cmd.add_argument(
        "--fp32-baseline", action="store_true", help="also train your FP32 setup, and compare"
    )
    cmd.add_argument("--out", default="train", help="folder for checkpoints, logs, SavedModel")
    _add_option(cmd, "loader", help=None)
    cmd.set_defaults(func=commands.cmd_train)


def _add_finish(subparsers: Any) -> None:
    cmd = subparsers.add_parser(
        "finish",
        help="confirm and export the answer of a shared study once its workers are done",
        description="No new trials: re-measure the best candidates of STUDY, choose the "
        "answer and export it (the same as `precsearch run ... --trials 0`).",
    )
    _shared_study(cmd)
    _add_option(cmd, "confirm_top", convert=positive_int, help=None)  # it confirms: 1 or more
    _add_option(cmd, "confirm_time", help="most seconds of timed rounds per phase (default 60)")
    _add_option(cmd, "gpu", help="measure on GPU I only")
    _debug(cmd)
    cmd.set_defaults(func=commands.cmd_finish)


def _add_plugins_and_policy(subparsers: Any) -> None:
    cmd = subparsers.add_parser("plugins", help="list installed plugins by kind")
    cmd.set_defaults(func=commands.cmd_plugins)
    cmd = subparsers.add_parser("policy", help="check a policy file and print what it says")
    cmd.add_argument("file", help="a policy JSON file (precsearch.policy/1)")
    cmd.set_defaults(func=commands.cmd_policy)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every sub-command.

    The flags that are options of a search (all of ``run``'s, the ones other commands
    share) are made from their one definition, the fields of :class:`SearchOptions`.
    """
    parser = _Parser(
        prog="precsearch",
        description="Search for the fastest mixed-precision policy that still trains like FP32.",
    )
    parser.add_argument("--version", action="version", version=f"precsearch {__version__}")
    _add_option(
        parser, "debug",
        help="show the traceback of an error, and for run, worker and finish the trial "
        "worker's output, TensorFlow's logs included",
    )  # fmt: skip
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in (
        _add_run, _add_study_readers, _add_worker, _add_probe, _add_doctor, _add_train,
        _add_finish, _add_plugins_and_policy,
    ):  # fmt: skip
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``precsearch`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("precsearch: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        # One line, whatever it was (and no password of a storage URL): bad input exits
        # 2, anything else 1.
        from precsearch.study.storage import redact

        if isinstance(exc, UserInputError):
            print(redact(f"precsearch: error: {exc}"), file=sys.stderr)
            return 2
        if isinstance(exc, PrecsearchError):
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "failed"
            print(redact(f"precsearch: error: {first}"), file=sys.stderr)
        elif isinstance(exc, OSError):
            print(redact(f"precsearch: error: {one_line(exc)}"), file=sys.stderr)
        else:
            print(
                redact(f"precsearch: error: {one_line(exc)}")
                + " (run with --debug for the traceback; if this is not about your model, "
                "storage or files, please report it)",
                file=sys.stderr,
            )
        return 1


if __name__ == "__main__":
    sys.exit(main())
