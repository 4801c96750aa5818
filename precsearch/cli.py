"""The ``precsearch`` command line.

Only argument parsing and printing live here; each command calls the module that does
the work. TensorFlow is imported only by commands that build or train a model, so
``precsearch --help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from precsearch._version import __version__
from precsearch.errors import PrecsearchError, UserInputError, one_line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like a UserInputError
        self.exit(2, f"precsearch: error: {message} (see precsearch --help)\n")


def _cmd_policy(args: argparse.Namespace) -> int:
    from precsearch.policy import load_policy

    policy = load_policy(args.file)
    print(f"{args.file}: valid {policy.to_dict()['format']} policy")
    print(f"  default      {policy.default}")
    for name, dtype in policy.types.items():
        print(f"  type  {name:<24} {dtype}")
    for name, dtype in policy.layers.items():
        print(f"  layer {name:<24} {dtype}")
    scale = policy.loss_scale
    kind = "dynamic" if scale.dynamic else "fixed"
    print(f"  loss scale   {kind}, initial {scale.initial_scale:g}, growth {scale.growth_steps}")
    rule = f"lr rule {policy.lr_rule}, base {policy.base_batch_size}"
    print(f"  batch size   {policy.batch_size} ({rule})")
    print(f"  jit_compile  {policy.jit_compile}")
    return 0


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


def run_options(args: argparse.Namespace) -> Any:
    """The :class:`~precsearch.options.SearchOptions` of ``precsearch run``'s flags."""
    from precsearch.options import SearchOptions

    return SearchOptions(
        trials=args.trials,
        timeout=args.timeout,
        trial_timeout=args.trial_timeout,
        study_name=args.study_name,
        storage=args.storage,
        out=args.out,
        group_by=args.group_by,
        dtypes=args.dtypes,
        steps=args.steps,
        tolerance=args.tolerance,
        sampler=args.sampler,
        in_process=args.in_process,
        seed=args.seed,
        lr_rule=args.lr_rule,
        batch_size=args.batch_size,
        confirm_top=args.confirm,
        rounds=args.rounds,
        watchdog=args.watchdog,
        dimensions=args.dimension,
        objectives=args.objective,
        exporters=args.export,
        loader=args.loader,
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from precsearch.report import pareto_table, time_summary
    from precsearch.study import run_study

    if not Path(args.model_file).is_file():
        raise UserInputError(f"{args.model_file}: no such model file")
    options = run_options(args)
    run = run_study(args.model_file, options)
    for note in run.notes:
        print(f"note: {note}")
    print()
    print(f"Feasible Pareto front of study {run.study.study_name!r} (speedup vs FP32):")
    print(pareto_table(run.study))
    if run.verdict:
        print()
        print(f"Answer: {run.verdict}.")
    print()
    print(time_summary(run.results, run.seconds))
    print()
    _print_paths(run.paths)
    return _failed(run)


def _failed(run: Any) -> int:
    """1 (with one line) when the run failed after its trials, which stay stored."""
    if not run.failure:
        return 0
    done = sum(t.state.name == "COMPLETE" for t in run.study.get_trials(deepcopy=False))
    print(
        f"precsearch: error: {run.failure}; the study and its {done} completed trials are "
        "kept: run it again to retry",
        file=sys.stderr,
    )
    return 1


def _cmd_worker(args: argparse.Namespace) -> int:
    from precsearch.report import time_summary
    from precsearch.study import run_study, worker_options

    model_file, options = worker_options(
        args.study, args.storage, args.out, args.trials, args.timeout, args.model_file
    )
    run = run_study(model_file, options)
    for note in run.notes:
        print(f"note: {note}")
    print()
    print(time_summary(run.results, run.seconds))
    return _failed(run)


def _print_paths(paths: dict) -> None:
    for label, path in paths.items():
        print(f"{label + ':':<18} {path}")


def _cmd_plugins(args: argparse.Namespace) -> int:
    from precsearch.plugins import GROUPS, PluginError, available

    for kind, group in GROUPS.items():
        print(f"{kind}s ({group}):")
        entries = available(kind)
        names = [entry.name for entry in entries]
        for entry in entries:
            try:
                cls = entry.load()
                doc = (cls.__doc__ or "").strip().splitlines()
                status = doc[0] if doc else ""
            except PluginError as exc:
                status = f"BROKEN: {exc}"
            if names.count(entry.name) > 1:
                status = f"DUPLICATE NAME ({names.count(entry.name)} distributions): {status}"
            print(f"  {entry.name:<16} {entry.distribution:<24} {status}")
        if not entries:
            print("  (none)")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from precsearch.api import load_study
    from precsearch.report import assignments_summary, pareto_table

    result = load_study(args.study, storage=args.storage, out=args.out)
    study = result.study
    states: dict[str, int] = {}
    for trial in study.trials:
        # A sampler's repeat of a measured policy is stored, but it is not a trial.
        state = "repeats" if "duplicate_of" in trial.user_attrs else trial.state.name.lower()
        states[state] = states.get(state, 0) + 1
    counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    trials = len(study.trials) - states.get("repeats", 0)
    print(f"Study {study.study_name!r}: {trials} trials ({counts})")
    print(f"Model file: {study.user_attrs.get('model_file', '?')}")
    print()
    print("Feasible Pareto front (speedup vs FP32):")
    print(pareto_table(study))
    record = result.confirmation
    print()
    if not record:
        print("Not confirmed yet: `precsearch run` confirms the winners when its trials end.")
    else:
        print(f"Answer: {record.verdict}.")
        policy = result.best_policy
        layers = (study.user_attrs.get("model_info") or {}).get("layers", [])
        print(
            f"Best policy (trial {record.best_trial}): batch size {policy.batch_size}, "
            f"XLA {'on' if policy.jit_compile else 'off'}; per layer class:"
        )
        for line in assignments_summary(policy, layers):
            print(f"  {line}")
    print()
    paths = {"study folder": result.study_dir}
    for name in ("study.journal", "trials.csv", "best_policy.json", "saved_model"):
        if (result.study_dir / name).exists():
            paths[name] = result.study_dir / name
    _print_paths(paths)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from precsearch.api import load_study
    from precsearch.options import DEFAULT_EXPORTERS

    result = load_study(args.study, storage=args.storage, out=args.out)

    paths = result.export(args.to, [*DEFAULT_EXPORTERS, *args.export])
    if "best_policy.json" not in paths:
        print("note: the study has no confirmed best policy yet; only trials.csv was written")
    _print_paths(paths)
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from precsearch.doctor import diagnose, render
    from precsearch.plugins import create
    from precsearch.problem import Problem

    if not Path(args.model_file).is_file():
        raise UserInputError(f"{args.model_file}: no such model file")
    problem = Problem(create("loader", args.loader).load(args.model_file), args.batch_size)
    report = diagnose(problem)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from precsearch.train import train

    if not Path(args.model_file).is_file():
        raise UserInputError(f"{args.model_file}: no such model file")
    runs = train(
        args.model_file, args.policy, args.epochs, args.steps, args.fp32_baseline, args.out,
        args.loader,
    )  # fmt: skip
    names = sorted({k for run in runs.values() for k in run["final"]})
    print()
    print(f"{'':<10}" + "".join(f"{n:>14}" for n in [*names, "seconds"]))
    for label, run in runs.items():
        cells = "".join(f"{run['final'].get(n, float('nan')):>14.4g}" for n in names)
        print(f"{label:<10}{cells}{run['seconds']:>14.1f}")
    stopped = [f"{label}: {run['stopped']}" for label, run in runs.items() if run["stopped"]]
    for label, run in runs.items():
        if run.get("saved_model"):
            print(f"{label} SavedModel: {run['saved_model']}")
    if stopped:
        print("precsearch: error: " + "; ".join(stopped), file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every sub-command."""
    parser = _Parser(
        prog="precsearch",
        description="Search for the fastest mixed-precision policy that still trains like FP32.",
    )
    parser.add_argument("--version", action="version", version=f"precsearch {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (before COMMAND)"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    cmd = commands.add_parser(
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
    cmd.add_argument("--dtypes", help="e.g. float32,bfloat16 (default: what runs fast here)")
    cmd.add_argument("--steps", type=_positive_int, help="training steps per trial")
    cmd.add_argument("--tolerance", type=_positive_float, help="largest fidelity gap (bands)")
    cmd.add_argument("--sampler", choices=["tpe", "nsga2", "random", "grid"], default="tpe")
    cmd.add_argument("--lr-rule", choices=["linear", "sqrt", "none"], default="linear")
    cmd.add_argument("--batch-size", type=_positive_int, help="the model's own batch size")
    cmd.add_argument(
        "--in-process", action="store_true", help="run trials here (no crash isolation)"
    )
    cmd.add_argument("--seed", type=int, default=0, help="sampler seed")

    cmd.add_argument(
        "--confirm", type=_count, default=3, metavar="N", help="re-measure the top N (0: skip)"
    )
    cmd.add_argument("--rounds", type=_positive_int, default=5, help="confirmation rounds")
    cmd.add_argument(
        "--watchdog",
        type=_positive_float,
        metavar="X",
        help="stop a trial whose first step is X times slower than FP32's (default 5)",
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
    cmd.set_defaults(func=_cmd_run)

    for name, text in (
        ("show", "print a study's Pareto front, confirmed figures and best policy"),
        ("export", "write a study's best policy, SavedModel and trials.csv into a folder"),
    ):
        cmd = commands.add_parser(name, help=text)
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
        cmd.set_defaults(func=_cmd_show if name == "show" else _cmd_export)

    cmd = commands.add_parser(
        "worker",
        help="run trials of an existing study on a shared storage (one per machine)",
        description="Join a study that `precsearch run` created on a shared storage "
        "(PostgreSQL): run trials with the study's own options, no confirmation.",
    )
    cmd.add_argument("study", metavar="STUDY", help="the study's name")
    cmd.add_argument("--storage", required=True, help="the shared Optuna storage URL")
    cmd.add_argument("--trials", type=_positive_int, help="trials to run (default 16)")
    cmd.add_argument("--timeout", type=_positive_float, help="stop starting trials after SEC")
    cmd.add_argument("--model-file", help="the model file here (default: the study's path)")
    cmd.add_argument("--out", default="studies", help="folder for this worker's work files")
    cmd.set_defaults(func=_cmd_worker)

    cmd = commands.add_parser(
        "doctor",
        help="check a model and this machine for mixed-precision pitfalls before searching",
    )
    cmd.add_argument("model_file", metavar="MODEL_FILE")
    cmd.add_argument("--json", action="store_true", help="the report as JSON")
    cmd.add_argument("--batch-size", type=_positive_int, help="the model's own batch size")
    cmd.add_argument("--loader", default="model_file", metavar="NAME[=ARG]")
    cmd.set_defaults(func=_cmd_doctor)

    cmd = commands.add_parser(
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
    cmd.set_defaults(func=_cmd_train)

    cmd = commands.add_parser("plugins", help="list installed plugins by kind")
    cmd.set_defaults(func=_cmd_plugins)

    cmd = commands.add_parser("policy", help="check a policy file and print what it says")
    cmd.add_argument("file", help="a policy JSON file (precsearch.policy/1)")
    cmd.set_defaults(func=_cmd_policy)
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
        from precsearch.storage import redact

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
