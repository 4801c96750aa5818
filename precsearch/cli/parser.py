"""The ``precsearch`` command line: the parser, and one line for any error.

What each command does is in :mod:`precsearch.cli.commands`. TensorFlow is imported only by
commands that build or train a model, so ``precsearch --help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import precsearch.cli.commands as commands
from precsearch._version import __version__
from precsearch.cli.commands import run_options
from precsearch.errors import PrecsearchError, UserInputError, one_line

__all__ = ["build_parser", "main", "run_options"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like a UserInputError
        self.exit(2, f"precsearch: error: {message} (see precsearch --help)\n")


def _positive_int(text: str, least: int = 1) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < least:
        raise argparse.ArgumentTypeError(
            f"{value} is not a positive integer" if least else f"{value} is negative"
        )
    return value


def _count(text: str) -> int:
    return _positive_int(text, least=0)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def _seconds(text: str) -> float:
    """0 or more seconds."""
    value = 0.0 if text.strip() in ("0", "0.0") else None
    return value if value is not None else _positive_float(text)


def _shared_study(cmd: argparse.ArgumentParser, out_help: str) -> None:
    """The arguments that name a study on a shared storage and this machine's files."""
    cmd.add_argument("study", metavar="STUDY", help="the study's name")
    cmd.add_argument("--storage", required=True, help="the shared Optuna storage URL")
    cmd.add_argument("--model-file", help="the model file here (default: the study's path)")
    cmd.add_argument("--out", default="studies", help=out_help)


DEBUG_HELP = "show the trial worker's output, TensorFlow's logs included, and an error's traceback"


def _debug(cmd: argparse.ArgumentParser) -> None:
    """``--debug`` after a command that starts workers, as well as before it."""
    # SUPPRESS: a command that is not given it keeps the value from before the command.
    cmd.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every sub-command."""
    parser = _Parser(
        prog="precsearch",
        description="Search for the fastest mixed-precision policy that still trains like FP32.",
    )
    parser.add_argument("--version", action="version", version=f"precsearch {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of an error, and for run, worker and finish the trial "
        "worker's output, TensorFlow's logs included",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    cmd = subparsers.add_parser(
        "run",
        help="search for the fastest policy that trains like FP32",
        description="Run (or resume) a study on MODEL_FILE, which defines build_model() "
        "and train_data() (see the README).",
    )
    cmd.add_argument("model_file", metavar="MODEL_FILE")
    cmd.add_argument(
        "--trials",
        type=_count,
        help="trials to run now (default 16; 0: only confirm and export, say after workers "
        "on other machines)",
    )
    cmd.add_argument("--timeout", type=_positive_float, help="stop starting trials after SEC")
    cmd.add_argument(
        "--trial-timeout", type=_positive_float, default=1800.0, help="kill a trial after SEC"
    )
    cmd.add_argument("--study-name", help="default: the model file's folder or name")
    cmd.add_argument("--storage", help="an Optuna storage URL (default: a journal file)")
    cmd.add_argument("--out", default="studies", help="folder of study folders")
    cmd.add_argument("--group-by", choices=["global", "type", "block", "layer"])
    cmd.add_argument(
        "--casts",
        choices=["follow", "independent"],
        default="follow",
        help="follow (default): only layers that compute get a dtype choice, shape and "
        "element-wise layers take their input's; independent: every layer gets one",
    )
    cmd.add_argument(
        "--sensitive",
        action="store_true",
        help="with --casts follow, offer softmax layers a low dtype too (float32 by default)",
    )
    cmd.add_argument("--dtypes", help="e.g. float32,bfloat16 (default: what runs fast here)")
    cmd.add_argument("--steps", type=_positive_int, help="training steps per trial")
    cmd.add_argument("--tolerance", type=_positive_float, help="largest fidelity gap (bands)")
    cmd.add_argument("--sampler", choices=["tpe", "nsga2", "random", "grid"], default="tpe")
    cmd.add_argument(
        "--lr-rule",
        choices=["auto", "linear", "sqrt", "none"],
        default="auto",
        help="how the learning rate follows the batch size (default auto: square root for "
        "Adam-family optimizers, linear for SGD)",
    )
    cmd.add_argument("--batch-size", type=_positive_int, help="the model's own batch size")
    cmd.add_argument(
        "--in-process", action="store_true", help="run trials here (no crash isolation)"
    )
    cmd.add_argument("--seed", type=int, default=0, help="sampler seed")
    cmd.add_argument(
        "--heartbeat",
        type=_positive_int,
        default=60,
        metavar="SEC",
        help="on a shared storage: a trial beats every SEC s; one silent 5 beats is failed "
        "and retried once (default 60)",
    )
    cmd.add_argument("--gpu", type=_count, metavar="I", help="run trials on GPU I only")
    cmd.add_argument(
        "--strategy",
        choices=["none", "mirrored"],
        default="none",
        help="mirrored: train each trial data-parallel over the visible GPUs",
    )

    cmd.add_argument(
        "--confirm", type=_count, default=3, metavar="N", help="re-measure the top N (0: skip)"
    )
    cmd.add_argument(
        "--confirm-time",
        type=_positive_float,
        default=60.0,
        metavar="S",
        help="most seconds of timed rounds for the selection, and again for the fresh "
        "rounds (default 60; at least 5 rounds each)",
    )
    cmd.add_argument(
        "--probe-time",
        type=_seconds,
        metavar="S",
        help="most seconds of timed rounds for the probes before the search: each layer "
        "group alone in low precision against FP32 (default 30, or $PRECSEARCH_PROBE_TIME; "
        "0: no probes)",
    )
    cmd.add_argument(
        "--watchdog",
        type=_positive_float,
        metavar="X",
        help="stop a trial whose first step is X times slower than FP32's (default 5)",
    )
    cmd.add_argument(
        "--keep-slow",
        action="store_true",
        help="train trials that are confidently slower than FP32 (or than the best "
        "feasible trial) to the end of their budget (to see how they train) instead of "
        "stopping them as too slow",
    )
    cmd.add_argument(
        "--dimension",
        action="append",
        metavar="NAME[=ARG]",
        help="search dimensions (repeatable; replaces the default layer_dtypes, loss_scale, "
        "batch_size, jit_compile)",
    )
    cmd.add_argument(
        "--objective",
        action="append",
        default=[],
        metavar="NAME[=ARG]",
        help="an extra objective or constraint beside speedup and fidelity (repeatable)",
    )
    cmd.add_argument(
        "--export",
        action="append",
        default=[],
        metavar="NAME[=ARG]",
        help="an extra exporter beside policy_json, saved_model, trials_csv (repeatable)",
    )
    cmd.add_argument(
        "--loader",
        default="model_file",
        metavar="NAME[=ARG]",
        help="how MODEL_FILE is read (default model_file; see precsearch plugins)",
    )
    _debug(cmd)
    cmd.set_defaults(func=commands.cmd_run)

    for name, text in (
        ("show", "print a study's Pareto front, confirmed figures and best policy"),
        ("export", "write a study's best policy, SavedModel and trials.csv into a folder"),
        ("report", "write a study's report.html (one file, opens offline) and TensorBoard logs"),
    ):
        cmd = subparsers.add_parser(name, help=text)
        cmd.add_argument("study", metavar="STUDY", help="a study folder, or a study name")
        cmd.add_argument("--storage", help="the Optuna storage URL of a named study")
        cmd.add_argument("--out", default="studies", help="folder of study folders")
        if name == "export":
            cmd.add_argument("--to", required=True, metavar="DIR", help="where to write")
            cmd.add_argument(
                "--export",
                action="append",
                default=[],
                metavar="NAME[=ARG]",
                help="an extra exporter plugin (repeatable)",
            )
        cmd.set_defaults(func=getattr(commands, f"cmd_{name}"))

    cmd = subparsers.add_parser(
        "worker",
        help="run trials of an existing study on a shared storage (one per machine)",
        description="Join a study that `precsearch run` created on a shared storage "
        "(PostgreSQL): run trials with the study's own options, no confirmation.",
    )
    _shared_study(cmd, "folder for this worker's work files")
    cmd.add_argument("--trials", type=_positive_int, help="trials to run (default 16)")
    cmd.add_argument("--timeout", type=_positive_float, help="stop starting trials after SEC")
    cmd.add_argument("--gpu", type=_count, metavar="I", help="run trials on GPU I only")
    _debug(cmd)
    cmd.set_defaults(func=commands.cmd_worker)

    cmd = subparsers.add_parser(
        "probe",
        help="measure each layer group alone in low precision against FP32 (what run "
        "does before its search), and print it",
    )
    cmd.add_argument("model_file", metavar="MODEL_FILE")
    cmd.add_argument("--group-by", choices=["global", "type", "block", "layer"])
    cmd.add_argument("--casts", choices=["follow", "independent"], default="follow")
    cmd.add_argument("--sensitive", action="store_true", help="softmax layers probed too")
    cmd.add_argument("--dtypes", help="e.g. float32,bfloat16 (default: what runs fast here)")
    cmd.add_argument("--batch-size", type=_positive_int, help="the model's own batch size")
    cmd.add_argument(
        "--probe-time", type=_positive_float, default=30.0, metavar="S",
        help="most seconds of timed rounds (default 30)",
    )  # fmt: skip
    cmd.add_argument("--in-process", action="store_true", help="run here (no crash isolation)")
    cmd.add_argument("--json", action="store_true", help="the probes as JSON")
    cmd.add_argument("--loader", default="model_file", metavar="NAME[=ARG]")
    _debug(cmd)
    cmd.set_defaults(func=commands.cmd_probe)

    cmd = subparsers.add_parser(
        "doctor",
        help="check a model and this machine for mixed-precision pitfalls before searching",
    )
    cmd.add_argument("model_file", metavar="MODEL_FILE")
    cmd.add_argument("--json", action="store_true", help="the report as JSON")
    cmd.add_argument("--batch-size", type=_positive_int, help="the model's own batch size")
    cmd.add_argument("--loader", default="model_file", metavar="NAME[=ARG]")
    cmd.set_defaults(func=commands.cmd_doctor)

    cmd = subparsers.add_parser(
        "train",
        help="train a model for real under a policy file, guarded, and export it",
        description="Train MODEL_FILE under a policy (best_policy.json) with the numerics "
        "guard, checkpoints of the float32 master weights and a SavedModel export.",
    )
    cmd.add_argument("model_file", metavar="MODEL_FILE")
    cmd.add_argument("--policy", required=True, help="a policy file (best_policy.json)")
    length = cmd.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=_positive_int, help="passes over the data (default 1)")
    length.add_argument("--steps", type=_positive_int, help="training steps in all")
    cmd.add_argument(
        "--fp32-baseline", action="store_true", help="also train your FP32 setup, and compare"
    )
    cmd.add_argument("--out", default="train", help="folder for checkpoints, logs, SavedModel")
    cmd.add_argument("--loader", default="model_file", metavar="NAME[=ARG]")
    cmd.set_defaults(func=commands.cmd_train)

    cmd = subparsers.add_parser(
        "finish",
        help="confirm and export the answer of a shared study once its workers are done",
        description="No new trials: re-measure the best candidates of STUDY, choose the "
        "answer and export it (the same as `precsearch run ... --trials 0`).",
    )
    _shared_study(cmd, "folder of study folders")
    cmd.add_argument("--confirm", type=_positive_int, default=3, metavar="N")
    cmd.add_argument(
        "--confirm-time", type=_positive_float, default=60.0, metavar="S",
        help="most seconds of timed rounds per phase (default 60)",
    )  # fmt: skip
    cmd.add_argument("--gpu", type=_count, metavar="I", help="measure on GPU I only")
    _debug(cmd)
    cmd.set_defaults(func=commands.cmd_finish)

    cmd = subparsers.add_parser("plugins", help="list installed plugins by kind")
    cmd.set_defaults(func=commands.cmd_plugins)

    cmd = subparsers.add_parser("policy", help="check a policy file and print what it says")
    cmd.add_argument("file", help="a policy JSON file (precsearch.policy/1)")
    cmd.set_defaults(func=commands.cmd_policy)
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
