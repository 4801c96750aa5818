"""What each ``precsearch`` command does once its arguments are parsed (:mod:`precsearch.cli`).

Each function takes the parsed arguments, calls the module that does the work, prints
for people and returns the exit status. Heavy modules (Optuna, TensorFlow) are imported
inside the commands that need them, so ``precsearch --help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from precsearch.errors import UserInputError
from precsearch.study.options import SearchOptions, option_flags

__all__ = [
    "cmd_doctor",
    "cmd_export",
    "cmd_finish",
    "cmd_plugins",
    "cmd_policy",
    "cmd_report",
    "cmd_run",
    "cmd_show",
    "cmd_train",
    "cmd_worker",
    "run_options",
]


def cmd_policy(args: argparse.Namespace) -> int:
    from precsearch.policy import load_policy
    from precsearch.policy.layers import LayerRecord
    from precsearch.results.report import serving_text

    policy = load_policy(args.file)
    serving = policy.manifest.get("serving") or {}
    print(f"{args.file}: valid {policy.to_dict()['format']} policy")
    print(f"  default      {policy.default}")
    for name, dtype in policy.types.items():
        print(f"  type  {name:<24} {dtype}")
    for name, dtype in policy.layers.items():
        print(f"  layer {name:<24} {dtype}")
    if "follow" in {*policy.types.values(), *policy.layers.values()}:
        print("  follow: the layer takes the dtype of the layers that feed it (no cast)")
    # What the output layer computes in (the policy's own rule: a layer rule, exact or a
    # pattern, names it, else float32), and holds where the study recorded it.
    outputs = serving.get("outputs") or {}
    for name, kind in outputs.items():
        record = LayerRecord(name, name, "", is_output=True, is_model=False, floating=True)
        print(f"  output layer {name}: {policy.dtype_for(record)[0]}, holds {kind}")
    if not outputs:
        print("  output layer float32 unless a layer rule above names it")
    if policy.uses_float16():
        scale = policy.loss_scale
        kind = "dynamic" if scale.dynamic else "fixed"
        growth = f", growth {scale.growth_steps}" if scale.dynamic else ""
        print(f"  loss scale   {kind}, initial {scale.initial_scale:g}{growth}")
    else:
        print("  loss scale   none (no float16 layer: bfloat16 needs none)")
    if policy.batch_size is None:
        print("  batch size   yours")
    else:
        rule = f"lr rule {policy.lr_rule}, from batch {policy.base_batch_size}"
        print(f"  batch size   {policy.batch_size} ({rule}: x{policy.lr_factor():.3g})")
    print(f"  jit_compile  {policy.jit_compile}")
    line = serving_text(serving)
    if line:
        print(f"  {line}")
    return 0


def run_options(args: argparse.Namespace) -> SearchOptions:
    """The :class:`~precsearch.study.options.SearchOptions` of a command's flags: all of
    ``precsearch run``'s, or the ones another command shares (the rest stay defaults).

    Each such flag stores its value under its field's name (:mod:`precsearch.cli.parser`).
    """
    given = {name: getattr(args, name) for name in option_flags() if hasattr(args, name)}
    return SearchOptions(**given)


def cmd_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from precsearch.app.run import run_study
    from precsearch.results.report import SPEED_LEGEND, outside_trials, pareto_table, time_summary

    if not Path(args.model_file).is_file():
        raise UserInputError(f"{args.model_file}: no such model file")
    options = run_options(args)
    run = run_study(args.model_file, options)
    for note in run.notes:
        print(f"note: {note}")
    print()
    print(f"Feasible Pareto front of study {run.study.study_name!r} (speedup vs FP32):")
    print(pareto_table(run.study))
    print(f"  {SPEED_LEGEND}")
    if run.verdict:
        print()
        print(f"Answer (fresh rounds): {run.verdict}.")
    print()
    print(
        " ".join(filter(None, [time_summary(run.results, run.seconds), outside_trials(run.study)]))
    )
    print()
    _print_paths(run.paths)
    return _failed(run)


def cmd_probe(args: argparse.Namespace) -> int:
    import json
    import tempfile
    from pathlib import Path

    from precsearch.app.run import make_executor, prepare_run, space_for
    from precsearch.cost_model import XLA, probe_lines, ruled_out
    from precsearch.study.probe import run_probes

    if not Path(args.model_file).is_file():
        raise UserInputError(f"{args.model_file}: no such model file")
    run = prepare_run(args.model_file, run_options(args))
    with tempfile.TemporaryDirectory() as work:
        executor = make_executor(run.options, work, run.model_path, run.spec)
        try:
            executor.start()
            space = space_for(executor.model_info, run.options)
            record = run_probes(
                executor, space, run.options.probe_time, run.budget.block, run.options.seed
            )
        finally:
            executor.close()
    if args.json:
        print(json.dumps({**record, "ruled_out": ruled_out(record)}, indent=2))
        return 0
    print(
        "Each layer group alone in low precision"
        + (", and XLA," if any(e["param"] == XLA for e in record["probes"].values()) else "")
        + f" against FP32 ({record['rounds']} rounds "
        f"in {record['seconds']:.0f} s; speed 95% interval; numerics on one batch):"
    )
    for line in probe_lines(record):
        print(f"  {line}")
    return 0


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


def cmd_worker(args: argparse.Namespace) -> int:
    from precsearch.app.run import run_study
    from precsearch.results.report import time_summary
    from precsearch.study.options import worker_options

    model_file, options = worker_options(
        args.study, args.storage, args.out, args.trials, args.timeout, args.model_file, args.gpu
    )
    options.debug = args.debug  # this process's, not the study's
    run = run_study(model_file, options)
    for note in run.notes:
        print(f"note: {note}")
    print()
    print(time_summary(run.results, run.seconds))
    return _failed(run)


def cmd_finish(args: argparse.Namespace) -> int:
    from precsearch.app.run import run_study
    from precsearch.results.report import SPEED_LEGEND, pareto_table
    from precsearch.study.options import worker_options

    model_file, options = worker_options(
        args.study, args.storage, args.out, 0, None, args.model_file, args.gpu,
        confirm_top=args.confirm_top, confirm_time=args.confirm_time,
    )  # fmt: skip
    options.debug = args.debug  # this process's, not the study's
    run = run_study(model_file, options)
    for note in run.notes:
        print(f"note: {note}")
    print(f"Feasible Pareto front of study {run.study.study_name!r} (speedup vs FP32):")
    print(pareto_table(run.study))
    print(f"  {SPEED_LEGEND}")
    if run.verdict:
        print(f"\nAnswer (fresh rounds): {run.verdict}.")
    print()
    _print_paths(run.paths)
    return _failed(run)


def _print_paths(paths: dict) -> None:
    for label, path in paths.items():
        print(f"{label + ':':<18} {path}")


def cmd_plugins(args: argparse.Namespace) -> int:
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


def cmd_show(args: argparse.Namespace) -> int:
    from precsearch.app.api import load_study
    from precsearch.results.explain import (
        PINS_LEGEND,
        PROBE_LEGEND,
        WHY_LEGEND,
        pin_summary,
        probe_summary,
    )
    from precsearch.results.report import (
        SPEED_LEGEND,
        assignments_summary,
        pareto_table,
        serving_text,
        trials_text,
    )
    from precsearch.stored import model_layers, study_record

    result = load_study(args.study, storage=args.storage, out=args.out)
    study = result.study
    print(f"Study {study.study_name!r}: {trials_text(study)}")
    print(f"Model file: {study_record(study, 'model_file') or '?'}")
    print()
    print("Feasible Pareto front (speedup vs FP32):")
    print(pareto_table(study))
    print(f"  {SPEED_LEGEND}")
    record = result.confirmation
    print()
    if not record:
        print("Not confirmed yet: `precsearch run` confirms the winners when its trials end.")
    else:
        print(f"Answer (fresh rounds): {record.verdict}.")
        policy = result.best_policy
        layers = model_layers(study)
        print(
            f"Best policy (trial {record.best_trial}): batch size {policy.batch_size}, "
            f"XLA {'on' if policy.jit_compile else 'off'}; per layer class:"
        )
        for line in assignments_summary(policy, layers):
            print(f"  {line}")
        why = policy.manifest.get("why") or []
        if why:
            print(f"{WHY_LEGEND}:")
            for line in why:
                print(f"  {line}")
        serving = serving_text(policy.manifest.get("serving") or {})
        if serving:
            print(serving)
    for legend, lines in ((PINS_LEGEND, pin_summary(study)), (PROBE_LEGEND, probe_summary(study))):
        if lines:
            print(f"{legend}:")
            for line in lines:
                print(f"  {line}")
    print()
    paths = {"study folder": result.study_dir}
    for name in ("study.journal", "trials.csv", "best_policy.json", "saved_model", "report.html"):
        if (result.study_dir / name).exists():
            paths[name] = result.study_dir / name
    _print_paths(paths)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from precsearch.app.api import load_study
    from precsearch.results.html_report import write_report
    from precsearch.results.tensorboard_logs import TensorBoardLog

    result = load_study(args.study, storage=args.storage, out=args.out)
    folder = result.study_dir
    paths = {
        "report.html": write_report(result.study, folder / "report.html"),
        "tensorboard": TensorBoardLog(folder / "tensorboard").write_all(result.study),
    }
    _print_paths(paths)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from precsearch.app.api import load_study
    from precsearch.study.options import DEFAULT_EXPORTERS

    result = load_study(args.study, storage=args.storage, out=args.out)

    paths = result.export(args.to, [*DEFAULT_EXPORTERS, *args.exporters])
    if "best_policy.json" not in paths:
        print("note: the study has no confirmed best policy yet; only trials.csv was written")
    _print_paths(paths)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from precsearch.engine.doctor import diagnose, render
    from precsearch.engine.problem import Problem
    from precsearch.plugins import create

    if not Path(args.model_file).is_file():
        raise UserInputError(f"{args.model_file}: no such model file")
    problem = Problem(create("loader", args.loader).load(args.model_file), args.batch_size)
    report = diagnose(problem)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from precsearch.engine.train import train

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
        elif run.get("model.keras"):  # no SavedModel on this backend
            print(f"{label} model.keras: {run['model.keras']}")
    if stopped:
        print("precsearch: error: " + "; ".join(stopped), file=sys.stderr)
        return 1
    return 0
