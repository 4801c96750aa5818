"""Side-by-side benchmarks of precsearch on this machine: run by hand, never in CI.

    python benchmarks/run.py all            # all but scaling, in order (~2 hours on 2 cores)
    python benchmarks/run.py quality        # or one: instrument, quality, selection,
                                            #   repeatability, efficiency, overhead, scaling,
                                            #   casts, costmodel, warmstart, wall, readme
    python benchmarks/run.py quality --results benchmarks/results/<machine>   # elsewhere

Writes ``benchmarks/results/<name>.md`` (and ``.csv``) with the machine and the date.
Nothing else may run on the machine meanwhile: on 2 cores a second job skews every
figure (4x errors were seen that way). Study folders go to ``benchmarks/work/``
(ignored by git).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

import precsearch
from precsearch.hardware import describe
from precsearch.records import Budget, Measurement
from precsearch.results.report import (
    OUTSIDE,
    outside_trials,
    summarize_policy,
    time_split,
    time_summary,
    ttq_text,
)
from precsearch.results.report import PHASES as TIMED_PHASES
from precsearch.stats import figures_text, ratio_figures
from precsearch.stored import ran_results
from precsearch.study.confirm import confirm
from precsearch.study.executors import Worker
from precsearch.study.probe import probe_lines
from precsearch.study.selection import instrument_percent
from precsearch.study.space import SearchSpace, SpaceOptions

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
WORK = ROOT / "benchmarks" / "work"
STUDIES = ROOT / "studies"
# The load average (1, 5 and 15 minutes) as the running step began; set by main().
LOAD_BEFORE: tuple[float, float, float] | None = None

# Budgets sized for a 2-core CPU; each is stated in the results.
QUALITY = {
    "wide_mlp": {"trials": 10},
    "digits_cnn": {"trials": 10},
    "tiny_transformer": {"trials": 10},
    "tutorial_cnn": {"trials": 6, "steps": 30},
    "mobilenet_v2": {"trials": 6, "steps": 30},
    "overflow_trap": {"trials": 8, "group_by": "layer", "watchdog": 100.0},
}


def header(title: str) -> str:
    """A result page's title and what was checked of the machine it ran on."""
    hw = describe()
    versions = json.dumps(_versions())
    load = f"{_load(LOAD_BEFORE)} as the step began, " if LOAD_BEFORE else ""
    return (
        f"# {title}\n\n"
        f"Measured {datetime.date.today().isoformat()} on {hw['cpu']} ({hw['cpu_count']} cores; "
        f"low-precision flags: {', '.join(hw['cpu_low_precision_flags']) or 'none'}; model and "
        f"flags from /proc/cpuinfo). Load average (1, 5, 15 min): {load}"
        f"{_load(os.getloadavg())} as it ended. Versions: {versions}. Produced by "
        "`python benchmarks/run.py`.\n\n"
    )


def _load(averages: tuple[float, float, float]) -> str:
    return ", ".join(f"{a:.2f}" for a in averages)


def write_csv(name: str, rows: list[dict[str, Any]]) -> None:
    """A benchmark's rows as ``<name>.csv`` in the results folder."""
    pd.DataFrame(rows).to_csv(RESULTS / f"{name}.csv", index=False)


def write_results(
    name: str, rows: list[dict[str, Any]], title: str, lines: list[str], machine: bool = True
) -> None:
    """A benchmark's rows as ``<name>.csv`` and its page as ``<name>.md``.

    The page is the title and the machine, then ``lines``; with ``machine``, the machine
    also goes to ``machine.json``, which the README's Results quote.
    """
    write_csv(name, rows)
    (RESULTS / f"{name}.md").write_text("\n".join([header(title), *lines]) + "\n")
    if machine:
        write_machine()


def markdown_table(columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    """A markdown table's lines: the column names, the rule, a line per row."""
    names = list(columns)
    return [_cells(names), "|---" * len(names) + "|", *(_cells(row) for row in rows)]


def _cells(values: Iterable[Any]) -> str:
    return "| " + " | ".join(str(v) for v in values) + " |"


def _versions() -> dict[str, str]:
    import keras
    import optuna

    return {
        "precsearch": precsearch.__version__,
        "keras": keras.__version__,
        "optuna": optuna.__version__,
    }


FP32_ANSWER = "FP32 itself"  # an FP32 answer has no ratio: the copy's is the error


def answer_fields(result: Any) -> dict[str, Any]:
    """A finished search's trials and confirmed answer, as the benchmark tables show them."""
    record = result.confirmation
    policy = result.best_policy
    frame = result.trials
    new = frame[frame["duplicate_of"].isna()]
    manifest = policy.manifest
    confirmed = manifest["confirmed"]
    peers = record.peers
    return {
        "trials": len(new),
        "statuses": ", ".join(f"{k} {v}" for k, v in new["status"].value_counts().items()),
        "best_trial": record.best_trial,
        "best_is_fp32": record.best_is_fp32,
        "best_policy": summarize_policy(policy.to_dict()),
        "batch_size": policy.batch_size,
        "jit": policy.jit_compile,
        "own_batch_size": manifest["baseline"]["batch_size"],
        "own_jit": manifest["baseline"]["jit_compile"],
        "answer": confirmed.get("answer"),
        "vs_fp32": (
            FP32_ANSWER if record.best_is_fp32 else figures_text(confirmed["speedup_vs_fp32"])
        ),
        "from_precision": figures_text(confirmed.get("from_precision")),
        "from_batch_and_xla": figures_text(confirmed.get("from_batch_size_and_xla")),
        "time_to_quality": ttq_text(confirmed.get("time_to_quality")),
        "vs_global": figures_text(confirmed.get("speedup_vs_global_mixed")),
        "global_peer": peer_text(peers.get("global")),
        "rewrite_peer": peer_text(peers.get("graph_rewrite")),
        "fp32_copy_vs_fp32": figures_text(record.null_vs_fp32),
        "instrument_error_pct": round(instrument_percent(record.null_vs_fp32), 1),
        "selection_rounds": record.rounds["selection"],
        "fresh_rounds": record.rounds["fresh"],
        "fidelity_gap": manifest["fidelity"]["gap"],
        "fp32_as_a_candidate_gap": manifest["fidelity"]["fp32_as_a_candidate"],
        "judged_on": manifest["fidelity"]["judging"],
        "lr_rule": manifest["lr_rule"].get("rule"),
        "precision_gap": manifest["fidelity"]["precision_gap"],
        "verdict": record.verdict,
        "raw_rounds": json.dumps(record.measured),
    }


def quality() -> None:
    rows = []
    for name, budget in QUALITY.items():
        shutil.rmtree(WORK / "quality" / name, ignore_errors=True)  # a fresh search
        t0 = time.perf_counter()
        result = precsearch.search(
            str(STUDIES / name / "model.py"),
            out=str(WORK / "quality"),
            study_name=name,
            progress=sys.stderr,
            **budget,
        )
        seconds = time.perf_counter() - t0
        rows.append(
            {
                "example": name,
                "budget": ", ".join(f"{k}={v}" for k, v in budget.items()),
                **answer_fields(result),
                "wall_s": round(seconds),
            }
        )
        write_csv("policy_quality", rows)  # so far, should a later example fail
    intro = (
        "Each example: a search with the stated budget (default steps from its "
        "`precsearch_config` unless given; every trial trains the same number of examples, "
        "judged one-sided against 3 FP32 runs of the user's own training with held-out "
        "data-order seeds, at equal samples), then the confirmation: the top 3 feasible "
        "candidates (and the global recipe, if feasible) re-measured round by round (blocks "
        "of at least 10 calls and 0.5 s, a random order each round, until every candidate "
        "is decided or measured to ±3%, at most 60 s) beside FP32 and a second copy of FP32; "
        "a candidate wins if its Bonferroni-corrected lower 95% bound clears 1 against both "
        "FP32 models; the winner must repeat on fresh rounds (at most 60 s more), where its "
        "figures come from, beside FP32 at its batch size and XLA setting (the split) and "
        "the peers. Ratios are samples/s within a round: geometric mean (95% bootstrap "
        "interval). 'FP32 copy' is the instrument's own error (the A/A test) in the fresh "
        "rounds; 'error' is the farthest its interval reaches from 1. 'To FP32 quality' is "
        "the wall time to the loss every FP32 run reached, FP32's over the answer's. The raw "
        "per-round rates of both phases are in `policy_quality.csv` (`raw_rounds`).\n"
    )
    cells = []
    for r in rows:
        gap = f"{r['fidelity_gap']:.2f}" if r["fidelity_gap"] is not None else "-"
        best = "FP32" if r["best_is_fp32"] else r["best_policy"]
        cells.append(
            [r["example"], r["budget"], best, r["batch_size"], "on" if r["jit"] else "off",
             r["vs_fp32"], r["from_precision"], r["from_batch_and_xla"], r["time_to_quality"],
             r["global_peer"], r["rewrite_peer"], r["fp32_copy_vs_fp32"],
             f"±{r['instrument_error_pct']}%", f"{r['selection_rounds']}+{r['fresh_rounds']}",
             gap, f"{r['wall_s']} s"]
        )  # fmt: skip
    columns = ["example", "budget", "answer", "batch", "XLA", "vs FP32", "= precision",
               "x batch/XLA", "to FP32 quality", "global recipe", "TF graph rewrite",
               "FP32 copy", "error", "rounds", "gap", "wall"]  # fmt: skip
    verdicts = [
        f"- **{r['example']}** ({r['trials']} trials: {r['statuses']}; LR rule {r['lr_rule']}; "
        f"judged on {r['judged_on']}; FP32 as a candidate: gap "
        f"{'-' if r['fp32_as_a_candidate_gap'] is None else round(r['fp32_as_a_candidate_gap'], 2)}"
        f"): {r['verdict']}."
        for r in rows
    ]
    write_results(
        "policy_quality",
        rows,
        "Policy quality: the found policy against your own FP32 training",
        [
            intro,
            *markdown_table(columns, cells),
            "\n## Verdicts, including every loss\n",
            *verdicts,
        ],
    )


def peer_text(peer: dict[str, Any] | None) -> str:
    """A peer's ratio to FP32, or why there is none."""
    if not peer:
        return "-"
    if peer.get("vs_fp32"):
        return figures_text(peer["vs_fp32"])
    return f"{peer['status']} ({peer['reason']})" if peer.get("reason") else peer["status"]


def selection(worker: Worker, policies: list[Any], rounds: int, block: int) -> Measurement:
    """Rounds of FP32, its copy and the policies as ``c0``, ``c1``... in random orders."""
    import numpy as np

    base = precsearch.Policy(batch_size=worker.model_info.batch_size,
                             jit_compile=worker.model_info.jit_compile)  # fmt: skip
    configs = [("fp32", base), ("null", base), *[(f"c{i}", p) for i, p in enumerate(policies)]]
    rng = np.random.default_rng(len(policies))
    orders = [[configs[i][0] for i in rng.permutation(len(configs))] for _ in range(rounds)]
    return worker.confirm(configs, orders, block)


REPEATABILITY = ("wide_mlp", "digits_cnn", "mobilenet_v2")


def repeatability() -> None:
    """The whole confirmation of a quality study, twice, in two worker processes."""
    rows = []
    for name in REPEATABILITY:
        folder = WORK / "quality" / name
        study = precsearch.load_study(folder).study
        budget = Budget(**study.user_attrs["budget"])
        for repeat in range(2):
            if repeat:
                time.sleep(30)  # a different time, as well as a different process
            with Worker(STUDIES / name / "model.py", folder / "work", budget) as worker:
                worker.start()
                record = confirm(study, worker, budget, seed=100 + repeat)
            rows.append(
                {
                    "example": name,
                    "run": repeat + 1,
                    "answer": "FP32" if record.best_is_fp32 else f"trial {record.best_trial}",
                    "answer_policy": summarize_policy(record.best_policy),
                    "vs_fp32": FP32_ANSWER
                    if record.best_is_fp32
                    else figures_text(record.best["speedup_vs_fp32"]),
                    "fp32_copy_vs_fp32": figures_text(record.null_vs_fp32),
                    "instrument_error_pct": round(instrument_percent(record.null_vs_fp32), 1),
                    "rounds": f"{record.rounds['selection']}+{record.rounds['fresh']}",
                    "winners": ", ".join(str(c["trial"]) for c in record.candidates if c["wins"])
                    or "none",
                    "verdict": record.verdict,
                }
            )
    intro = (
        "The whole confirmation (selection, then fresh rounds) of each policy-quality study "
        "run twice: two separate worker processes, 30 s apart, each with its own round "
        "orders, the default time caps. Same answer twice is the test; the figures are "
        "geometric means (95% interval) over the fresh rounds.\n"
    )
    table = markdown_table(
        ["example", "run", "answer", "vs FP32", "FP32 copy", "error", "rounds",
         "candidates that won the selection"],
        (
            [r["example"], r["run"], f"{r['answer']} ({r['answer_policy']})", r["vs_fp32"],
             r["fp32_copy_vs_fp32"], f"±{r['instrument_error_pct']}%", r["rounds"],
             r["winners"]]
            for r in rows
        ),
    )  # fmt: skip
    write_results("repeatability", rows, "Repeatability of the confirmation", [intro, *table])


# The instrument's own noise: identical FP32 models of an example timed in random-order
# rounds, every call kept, read with each block length and estimator.
INSTRUMENT = {"example": "wide_mlp", "copies": 4, "seconds": 60.0, "blocks": (0.25, 0.5, 1.0)}


def instrument() -> None:
    """A/A noise by block length and block estimator, and any bias by copy or position."""
    import math

    import numpy as np

    import precsearch.engine.instrument as timing
    from precsearch.engine.problem import Problem
    from precsearch.loaders import load_model_file

    cfg = INSTRUMENT
    problem = Problem(load_model_file(STUDIES / cfg["example"] / "model.py"))
    base = problem.baseline()
    estimators = {
        "median": np.median,
        "p10": lambda a: np.percentile(a, 10),
        "mean": np.mean,
    }
    rows = []
    for block_s in cfg["blocks"]:
        timing.MIN_BLOCK_S = block_s
        models = [
            timing.prepare(timing.Timed(f"m{i}", problem.model_for(base, seed=0),
                                        problem.iterator(base.batch_size, seed=0),
                                        base.batch_size), block=10, warmup=3)
            for i in range(cfg["copies"])
        ]  # fmt: skip
        rng = np.random.default_rng(0)
        calls: dict[str, list[list[float]]] = {m.label: [] for m in models}
        positions: dict[str, list[int]] = {m.label: [] for m in models}
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < cfg["seconds"]:
            for position, i in enumerate(rng.permutation(len(models))):
                model = models[i]
                timing.step(model.model, model.iterator)
                calls[model.label].append(
                    [timing.step(model.model, model.iterator)[0] for _ in range(model.steps)]
                )
                positions[model.label].append(position)
        rounds = min(len(v) for v in calls.values())
        round_s = (time.perf_counter() - t0) / rounds
        for name, estimate in estimators.items():
            rates = {k: np.array([1 / estimate(b) for b in v[:rounds]]) for k, v in calls.items()}
            logs = {k: np.log(v / rates["m0"]) for k, v in rates.items() if k != "m0"}
            sd = float(np.mean([np.std(v, ddof=1) for v in logs.values()]))
            by_position = [[] for _ in models]
            for k, v in rates.items():
                mean_round = np.exp(np.mean([np.log(r[:rounds]) for r in rates.values()], axis=0))
                for r in range(rounds):
                    by_position[positions[k][r]].append(math.log(v[r] / mean_round[r]))
            rows.append(
                {
                    "block_s": block_s,
                    "estimator": name,
                    "rounds": rounds,
                    "round_s": round_s,
                    "calls_per_block": ", ".join(str(m.steps) for m in models),
                    "aa_log_sd_per_round": sd,
                    # The variance of the mean per second of rounds: lower is better.
                    "variance_per_second": sd**2 * round_s,
                    "rounds_for_3pct": math.ceil((1.96 * sd / 0.03) ** 2),
                    "copies_vs_m0": ", ".join(f"{math.exp(v.mean()):.3f}" for v in logs.values()),
                    "by_position_pct": ", ".join(
                        f"{100 * (math.exp(np.mean(v)) - 1):+.1f}" for v in by_position
                    ),
                }
            )
    timing.MIN_BLOCK_S = 0.5
    intro = (
        f"{cfg['copies']} identical FP32 models of {cfg['example']} (its own batch size) timed "
        f"for {cfg['seconds']:.0f} s per block length in rounds of random order, as the "
        "confirmation times them, every call kept; each block read by its median, p10 or "
        "mean call. 'sd' is the standard deviation of a copy's per-round log ratio to the "
        "first copy (the A/A noise of one round); 'variance per second' weighs it by a "
        "round's length (lower: the interval narrows faster); 'rounds for ±3%' is how many "
        "rounds a 95% interval of half-width 3% needs at that sd. 'Copies vs m0' and 'by "
        "position' look for bias: a copy or a place in the round that reads apart beyond "
        "its noise.\n"
    )
    table = markdown_table(
        ["block", "estimator", "rounds", "round", "calls per block", "sd per round",
         "variance per second", "rounds for ±3%", "copies vs m0", "by position (%)"],
        (
            [f"{r['block_s']} s", r["estimator"], r["rounds"], f"{r['round_s']:.2f} s",
             r["calls_per_block"], f"{r['aa_log_sd_per_round']:.3f}",
             f"{r['variance_per_second']:.4f}", r["rounds_for_3pct"], r["copies_vs_m0"],
             r["by_position_pct"]]
            for r in rows
        ),
    )  # fmt: skip
    write_results("instrument", rows, "The instrument's own noise (A/A)", [intro, *table])


# The selection's error rates on real timings: an FP32 training beside copies of itself (no
# candidate is faster: any winner is a false one), and beside the same model without a side
# branch that FP32's carries (a real gain of about 10%, measured: branches 64/80/96/160
# wide read 1.08-1.10x/1.12x/1.16x/1.17x in short calibration runs on an AMX Xeon). The
# branch leaves the main layers' shapes alone: a narrower MLP (960 against 1024 wide, 0.92x
# the work) read 1.35x on an AVX2 CPU, a kernel's quirk rather than the work.
SELECTION = {"rounds": 150, "studies": 200, "branch": 64, "candidates": 3}


def _mlp_spec(branch: int) -> Any:
    """wide_mlp's model and data; with ``branch``, a side branch of that width from the
    first hidden layer into the logits as well (extra work in every step)."""
    import importlib.util

    from precsearch.records import ModelSpec

    path = STUDIES / "wide_mlp" / "model.py"
    module_spec = importlib.util.spec_from_file_location(f"wide_mlp_{branch}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)

    def build() -> Any:
        import keras

        inputs = keras.Input((module.FEATURES,))
        first = keras.layers.Dense(1024, activation="relu")(inputs)
        second = keras.layers.Dense(1024, activation="relu")(first)
        logits = keras.layers.Dense(module.CLASSES)(second)
        if branch:
            side = keras.layers.Dense(branch, activation="relu")(first)
            logits = keras.layers.Add()([logits, keras.layers.Dense(module.CLASSES)(side)])
        model = keras.Model(inputs, logits)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        return model

    return ModelSpec(
        source=f"wide_mlp{f' with a {branch}-wide side branch' if branch else ''}",
        config=dict(module.precsearch_config),
        build_model=build,
        train_data=module.train_data,
    )


def _record_rounds(branches: dict[str, int], rounds: int, seed: int) -> dict[str, Any]:
    """Rounds of real models timed as a confirmation times them (random orders, blocks of
    at least 10 calls and 0.5 s), with each round's wall time."""
    import numpy as np

    from precsearch.engine.instrument import Timed, prepare, timed_rounds
    from precsearch.engine.problem import Problem

    problems = {b: Problem(_mlp_spec(b)) for b in set(branches.values())}
    configs = []
    for label, branch in branches.items():
        problem = problems[branch]
        policy = problem.baseline()
        config = Timed(label, problem.model_for(policy, seed=0),
                       problem.iterator(policy.batch_size, seed=0), policy.batch_size)  # fmt: skip
        configs.append(prepare(config, block=10, warmup=3))
    rng = np.random.default_rng(seed)
    labels = list(branches)
    rates: dict[str, list[float]] = {label: [] for label in labels}
    orders, seconds = [], []
    for _ in range(rounds):
        order = [labels[i] for i in rng.permutation(len(labels))]
        t0 = time.perf_counter()
        for label, values in timed_rounds(configs, [order]).items():
            rates[label] += values
        orders.append(order)
        seconds.append(time.perf_counter() - t0)
    return {"rates": rates, "orders": orders, "seconds": seconds}


class _Replay:
    """An executor whose rounds are a recording's, in order from ``start``; its clock is
    the recorded wall time of the rounds handed out."""

    def __init__(self, recording: dict[str, Any], start: int, best: str | None = None) -> None:
        self.recording, self.next, self.elapsed, self.best = recording, start, 0.0, best

    def clock(self) -> float:
        return self.elapsed

    def confirm(self, configs: list, orders: list, block: int) -> Measurement:
        rec, n = self.recording, len(orders)
        rounds = [(self.next + i) % len(rec["orders"]) for i in range(n)]
        self.next += n
        self.elapsed += sum(rec["seconds"][r] for r in rounds)
        source = {label: self.best if label == "best" else label for label, _ in configs}
        rates = {label: [rec["rates"][source[label]][r] for r in rounds] for label, _ in configs}
        return Measurement(rates=rates, orders=[rec["orders"][r] for r in rounds])


def _study(recording: dict[str, Any], start: int, labels: list[str]) -> str | None:
    """One confirmation's decision on recorded rounds: the selection from ``start``, the
    winner's fresh rounds after it (at most 60 s each); the answer (``None``: FP32)."""
    import numpy as np

    from precsearch.study.confirm import report
    from precsearch.study.selection import choose, measure_rounds

    rng = np.random.default_rng(start)
    replay = _Replay(recording, start)
    configs = [(label, None) for label in ["fp32", "null", *labels]]
    chosen = measure_rounds(replay, configs, rng, 10, 60.0,
                            lambda m: choose(m, labels).decided, replay.clock)  # fmt: skip
    winner = choose(chosen, labels).winner
    if winner is None:
        return None
    fresh_replay = _Replay(recording, replay.next, best=winner)
    fresh = measure_rounds(fresh_replay, [("fp32", None), ("null", None), ("best", None)], rng,
                           10, 60.0, lambda m: False, fresh_replay.clock)  # fmt: skip
    best, _ = report(fresh, precsearch.Policy(default="mixed_bfloat16"), precsearch.Policy(), {})
    return winner if best["answer"] == "winner" else None


def selection_rates() -> None:
    """False winners and power of the selection, on rounds of real models."""
    import numpy as np

    cfg = SELECTION
    labels = [f"c{i}" for i in range(cfg["candidates"])]
    slow = cfg["branch"]  # FP32's model: with the side branch
    sessions = {
        "same": {"fp32": slow, "null": slow, **dict.fromkeys(labels, slow)},
        "gain": {"fp32": slow, "null": slow, "c0": 0, **dict.fromkeys(labels[1:], slow)},
    }
    rows, recordings = [], {}
    for name, branches in sessions.items():
        t0 = time.perf_counter()
        recordings[name] = recording = _record_rounds(branches, cfg["rounds"], seed=len(name))
        wall = time.perf_counter() - t0
        truth = ratio_figures(recording["rates"]["c0"], recording["rates"]["fp32"])
        aa = ratio_figures(recording["rates"]["null"], recording["rates"]["fp32"])
        starts = np.random.default_rng(7).integers(0, cfg["rounds"], size=cfg["studies"])
        answers = [_study(recording, int(start), labels) for start in starts]
        rows.append(
            {
                "session": name,
                "c0_branch": branches["c0"],
                "rounds": cfg["rounds"],
                "round_s_median": float(np.median(recording["seconds"])),
                "wall_s": round(wall),
                "c0_vs_fp32_whole_recording": figures_text(truth),
                "fp32_copy_whole_recording": figures_text(aa),
                "studies": cfg["studies"],
                "any_winner": sum(a is not None for a in answers),
                "c0_found": sum(a == "c0" for a in answers),
                "recording": json.dumps(recording),
            }
        )
    same, gain = rows
    intro = (
        "The confirmation's decision (selection, then the winner repeated on fresh rounds, "
        "each at most 60 s of rounds) replayed on rounds of real models recorded here: "
        f"wide_mlp with a {cfg['branch']}-wide side branch as FP32's training, its copy and "
        f"{cfg['candidates']} candidates, timed as a confirmation times them ({cfg['rounds']} "
        "rounds, random orders, blocks of at least 10 calls and 0.5 s). In 'same' every "
        "candidate is the same FP32 model under another label: any winner is a false one. In "
        "'gain' candidate c0 is the same MLP without the branch (a gain of about 10%), "
        "its true advantage measured over the whole recording. Each study starts at a "
        f"random round of the recording ({cfg['studies']} studies; they overlap, so they "
        "are not independent: the simulated-noise tests in `tests/test_selection.py` give "
        "the rates over independent studies). The raw rounds are in `selection.csv`.\n"
    )
    table = markdown_table(
        ["session", "c0 vs FP32 (whole recording)", "FP32 copy (whole recording)",
         "round", "studies", "a winner crowned", "c0 found"],
        (
            [r["session"], r["c0_vs_fp32_whole_recording"], r["fp32_copy_whole_recording"],
             f"{r['round_s_median']:.2f} s", r["studies"], r["any_winner"], r["c0_found"]]
            for r in rows
        ),
    )  # fmt: skip
    summary = (
        f"\nFalse winners: {same['any_winner']}/{same['studies']} studies "
        f"({same['any_winner'] / same['studies']:.1%}; target at most 5%). Power: the "
        f"{gain['c0_vs_fp32_whole_recording']} candidate found in {gain['c0_found']}/"
        f"{gain['studies']} studies ({gain['c0_found'] / gain['studies']:.0%}; target at "
        "least 80% for a 10% gain)."
    )
    write_results("selection", rows, "The selection's error rates on real models",
                  [intro, *table, summary])  # fmt: skip


# Small enough to enumerate: digits_cnn with one dtype per layer (5 hidden layers), XLA on or
# off and two batch sizes: 2**5 * 2 * 2 = 128 policies. (tiny_transformer by type, 256
# policies, ran over 24 minutes here without finishing.)
EFFICIENCY = {
    "example": "digits_cnn",
    "group_by": "layer",
    "dimensions": ["layer_dtypes", "jit_compile", "batch_size"],
    "batch_sizes": [64, 256],
    "rounds": 3,
    "block": 5,
    "chunk": 16,
}


def measure_every_policy(
    worker: Worker, space: SearchSpace, cfg: dict[str, Any], label: str
) -> dict[tuple, dict[str, float]]:
    """Every policy of ``space`` against FP32: ``cfg["chunk"]`` candidates per selection
    session of ``cfg["rounds"]`` rounds; the figures keyed by the parameter values in the
    order of ``space.choices()``."""
    choices = space.choices()
    names = list(choices)
    points = [dict(zip(names, v, strict=True)) for v in itertools.product(*choices.values())]
    table: dict[tuple, dict[str, float]] = {}
    t0 = time.perf_counter()
    for start in range(0, len(points), cfg["chunk"]):
        chunk = points[start : start + cfg["chunk"]]
        policies = [space.policy(p) for p in chunk]
        measured = selection(worker, policies, cfg["rounds"], cfg["block"])
        for i, params in enumerate(chunk):
            table[tuple(params[n] for n in names)] = ratio_figures(
                measured.rates[f"c{i}"], measured.rates["fp32"]
            )
        done = f"{len(table)}/{len(points)} measured ({time.perf_counter() - t0:.0f} s)"
        print(f"{label}: {done}", file=sys.stderr, flush=True)
    return table


def efficiency() -> None:
    import optuna

    cfg = EFFICIENCY
    name = cfg["example"]
    path = STUDIES / name / "model.py"
    budget = Budget(steps=20)
    work = WORK / "efficiency"
    with Worker(path, work, budget) as worker:
        worker.start()
        info = worker.model_info.to_dict()
        options = SpaceOptions(
            group_by=cfg["group_by"], dtypes=["float32", "bfloat16"], batch_sizes=cfg["batch_sizes"]
        )
        space = SearchSpace(info, options, cfg["dimensions"])
        choices = space.choices()
        names = list(choices)
        t0 = time.perf_counter()
        table = measure_every_policy(worker, space, cfg, "efficiency")
        measure_s = time.perf_counter() - t0
    speed = {key: figures["estimate"] for key, figures in table.items()}
    optimum = max(speed.values())
    write_csv(
        "search_efficiency_table",
        [
            {**dict(zip(names, key, strict=True)), **{f"speedup_{k}": v for k, v in f.items()}}
            for key, f in table.items()
        ],
    )

    def replay(sampler_name: str, trials: int, seed: int) -> float:
        samplers = {
            "tpe": lambda: optuna.samplers.TPESampler(seed=seed, n_startup_trials=3),
            "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed, population_size=4),
            "random": lambda: optuna.samplers.RandomSampler(seed=seed),
        }
        study = optuna.create_study(direction="maximize", sampler=samplers[sampler_name]())
        study.optimize(
            lambda t: speed[tuple(t.suggest_categorical(n, choices[n]) for n in names)],
            n_trials=trials,
        )
        return study.best_value / optimum

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for sampler_name in ("tpe", "nsga2", "random"):
        for trials in (10, 20, 30):
            shares = [replay(sampler_name, trials, seed) for seed in range(5)]
            rows.append(
                {
                    "sampler": sampler_name,
                    "trials": trials,
                    "mean_share": statistics.mean(shares),
                    "min_share": min(shares),
                    "max_share": max(shares),
                }
            )
    ranked = sorted(speed.items(), key=lambda kv: -kv[1])

    def label(key: tuple) -> str:
        policy = space.policy(dict(zip(names, key, strict=True)))
        return (
            f"{summarize_policy(policy.to_dict())}, batch {policy.batch_size}, "
            f"XLA {'on' if policy.jit_compile else 'off'}"
        )

    fp32_key = tuple(space.baselines()[0][1][n] for n in names)
    intro = (
        f"Space: {name}, `group_by={cfg['group_by']}`, dimensions {', '.join(names)}: "
        f"{len(table)} policies. Every point measured against FP32 (the user's training) "
        f"in chunks of {cfg['chunk']} interleaved with FP32 in one worker ({cfg['rounds']} rounds "
        f"of {cfg['block']} steps each; {measure_s:.0f} s in all); a point's figure is its "
        "geometric-mean speedup over the rounds. Fidelity is not part of this replay (speed "
        "only). Share = the best speedup a sampler found within N trials over the "
        "exhaustive optimum, over 5 seeds "
        "(TPE with 3 start-up trials, NSGA-II with population 4, Optuna's defaults otherwise).\n"
    )
    shares = markdown_table(
        ["sampler", "trials", "mean share", "min", "max"],
        (
            [r["sampler"], r["trials"], f"{r['mean_share']:.3f}", f"{r['min_share']:.3f}",
             f"{r['max_share']:.3f}"]
            for r in rows
        ),
    )  # fmt: skip
    best = markdown_table(
        ["rank", "policy", "speedup vs FP32: geometric mean (95% interval)"],
        (
            [i + 1, label(ranked[i][0]), figures_text(table[ranked[i][0]])]
            for i in [*range(5), len(ranked) - 1]
        ),
    )
    noise = table.get(fp32_key)
    spans = (
        f"\nThe whole table spans {ranked[-1][1]:.2f}x to {optimum:.2f}x. The FP32 point itself "
        "(the same configuration as the reference it is timed against) measured "
        f"{figures_text(noise)}: "
        "that is the noise of one table entry, so a share within that of 1 means 'found a "
        "point measured as well as the best', not a proven optimum. Full table: "
        "`search_efficiency_table.csv`."
    )
    write_results(
        "search_efficiency",
        rows,
        "Search efficiency: samplers replayed against an exhaustive table",
        [intro, *shares, "\n## The table\n", *best, spans],
    )


# A trial's phases as ``TrialResult.timings`` names them: the overhead files' columns.
PHASES = tuple(key for _, keys in TIMED_PHASES for key in keys)


# Studies whose trials are split: a fresh wide_mlp search of its own, and the MobileNetV2
# search of the quality step, so run quality first.
OVERHEAD = {
    "wide_mlp": ("overhead", "wide_mlp", {"trials": 8}),
    "mobilenet_v2": ("overhead", "mobilenet_v2", {"trials": 6, "steps": 30}),
}


def overhead() -> None:
    previous = []
    if (RESULTS / "overhead.csv").exists():
        # The last run's figures, kept beside the new ones: before and after a change.
        text = (RESULTS / "overhead.md").read_text().splitlines()
        measured = next((x for x in text if x.startswith("Measured ")), "Measured earlier (")
        previous_when = measured.removeprefix("Measured ").split(" (")[0]
        previous = pd.read_csv(RESULTS / "overhead.csv").to_dict("records")
    rows = []
    for name, (folder, study_name, budget) in OVERHEAD.items():
        wall = None
        if budget is not None:
            shutil.rmtree(WORK / folder / study_name, ignore_errors=True)  # a fresh search
            t0 = time.perf_counter()
            precsearch.search(
                str(STUDIES / name / "model.py"),
                out=str(WORK / folder),
                study_name=study_name,
                confirm_top=0,
                progress=sys.stderr,
                **budget,
            )
            wall = time.perf_counter() - t0
        study = precsearch.load_study(WORK / folder / study_name).study
        probes = study.user_attrs.get("probes") or {}
        results = ran_results(study.trials)
        totals, total, share = time_split(results)
        rows.append(
            {
                "example": name,
                "study": f"{folder}/{study_name}",
                "trials": len(results),
                "total_s": total,
                **totals,
                "overhead_share": share,
                "study_wall_s": wall,
                "probe_s": probes.get("seconds", 0.0),
                "answered_by_probes": sum(
                    bool(t.user_attrs.get("probe_rejected")) for t in study.trials
                ),
            }
        )
    intro = (
        "Summed over the trials of one fresh search per example (duplicates and trials "
        "the probes answered excluded, no confirmation; the probes themselves are in "
        "`costmodel.md`): wide_mlp with the default space (8 trials), MobileNetV2 (6 "
        "trials, 30 steps). Overhead = everything but the measured blocks "
        "and the rest of the training. `reference` = the FP32 runs of the user's training "
        "(3 seeds, once), one FP32 run per new batch size and XLA setting (the precision-only "
        "diagnostic) and the FP32 timing model; worker start, import and set-up are paid "
        "once per worker (one per study here) and charged to its first trial.\n"
    )
    table = markdown_table(
        ["example", "trials", "total", *PHASES, "overhead", "whole study", "probes",
         "answered by the probes"],
        (
            [r["example"], r["trials"], f"{r['total_s']:.0f} s",
             *(f"{r[p]:.0f} s" for p in PHASES), f"{r['overhead_share']:.0%}",
             f"{r['study_wall_s']:.0f} s", f"{r['probe_s']:.0f} s", r["answered_by_probes"]]
            for r in rows
        ),
    )  # fmt: skip
    before = []
    if previous:
        before = [
            f"\nThe previous run ({previous_when}): "
            + "; ".join(
                f"{r['example']} {r['trials']} trials in {r['total_s']:.0f} s, overhead "
                f"{r['overhead_share']:.0%}"
                for r in previous
            )
            + ". This page's figures replace it."
        ]
    write_results(
        "overhead", rows, "Overhead: where a trial's wall time goes", [intro, *table, *before]
    )


def scaling() -> None:
    rows = []
    for group_by in ("global", "type", "block", "layer"):
        shutil.rmtree(WORK / "scaling" / f"mobilenet_{group_by}", ignore_errors=True)
        t0 = time.perf_counter()
        result = precsearch.search(
            str(STUDIES / "mobilenet_v2" / "model.py"),
            out=str(WORK / "scaling"),
            study_name=f"mobilenet_{group_by}",
            group_by=group_by,
            trials=5,
            steps=20,
            dimensions=["layer_dtypes"],
            confirm_top=0,
            progress=sys.stderr,
        )
        seconds = time.perf_counter() - t0
        frame = result.trials
        feasible = frame[frame["feasible"]]
        best = feasible["objective_speedup"].max() if not feasible.empty else float("nan")
        first_best = (
            int(feasible.loc[feasible["objective_speedup"].idxmax(), "number"]) + 1
            if not feasible.empty
            else None
        )
        rows.append(
            {
                "group_by": group_by,
                "parameters": len([c for c in frame.columns if c.startswith("param:dtype")]),
                "trials": len(frame),
                "wall_s": round(seconds),
                "best_speedup": best,
                "trials_to_best": first_best,
            }
        )
    intro = (
        "MobileNetV2 (alpha 0.35, 96 px, 155 layers, 8 classes) with one dtype choice per "
        "model (`global`), per layer class (`type`), per block (`block`) or per layer "
        "(`layer`). Same budget each: 5 trials of 20 steps, only the layer_dtypes dimension "
        "(batch size 32, XLA off), no confirmation, TPE. The first two trials are the "
        "enqueued baselines (FP32, global bfloat16).\n"
    )
    table = markdown_table(
        ["group_by", "dtype parameters", "trials", "wall", "best feasible speedup",
         "trials to best"],
        (
            [r["group_by"], r["parameters"], r["trials"], f"{r['wall_s']} s",
             f"{r['best_speedup']:.2f}x", r["trials_to_best"]]
            for r in rows
        ),
    )  # fmt: skip
    budget = (
        "\nFive trials cannot explore 150 per-layer choices: the per-layer space needs a budget "
        "in the hundreds, which is why `type` is the default."
    )
    # Not machine.json: that is the machine of the steps the README quotes, and scaling isn't one.
    write_results(
        "scaling",
        rows,
        "Scaling: search cost vs the number of dtype choices (MobileNetV2)",
        [intro, *table, budget],
        machine=False,
    )


# The cast-aware space against independent choices: the same low-precision choice for
# the layers that compute, with the layers between them following (no casts) or kept
# float32 (a cast on each side), beside Keras's global recipe, in the same rounds.
CASTS = {"examples": ("digits_cnn", "mobilenet_v2", "tiny_transformer"), "rounds": 15}


def casts() -> None:
    """Dimensions offered and speed of the follow rule against independent choices."""
    rows = []
    for name in CASTS["examples"]:
        with Worker(STUDIES / name / "model.py", WORK / "casts" / name, Budget()) as worker:
            worker.start()
            info = worker.model_info.to_dict()
            spaces = {
                casts: SearchSpace(
                    info,
                    SpaceOptions(group_by="type", casts=casts, dtypes=["float32", "bfloat16"]),
                    ["layer_dtypes"],
                )  # fmt: skip
                for casts in ("follow", "independent")
            }
            follow, independent = spaces["follow"], spaces["independent"]
            computing = {p for p in follow.choices()}
            policies = {
                "follow": follow.policy({p: "bfloat16" for p in follow.choices()}),
                "independent": independent.policy(
                    {p: "bfloat16" if p in computing else "float32" for p in independent.choices()}
                ),
                "global": precsearch.Policy(default="mixed_bfloat16"),
            }
            base = worker.model_info
            for policy in policies.values():
                policy.batch_size, policy.jit_compile = base.batch_size, base.jit_compile
            measured = selection(worker, list(policies.values()), CASTS["rounds"], block=10)
        figures = {
            label: ratio_figures(measured.rates[f"c{i}"], measured.rates["fp32"])
            for i, label in enumerate(policies)
        }
        follow_vs_independent = ratio_figures(measured.rates["c0"], measured.rates["c1"])
        rows.append(
            {
                "example": name,
                "dims_follow": len(follow.choices()),
                "dims_independent": len(independent.choices()),
                "computing": ", ".join(sorted(p.removeprefix("dtype:") for p in computing)),
                **{f"{label}_vs_fp32": figures_text(f) for label, f in figures.items()},
                "follow_vs_independent": figures_text(follow_vs_independent),
                "fp32_copy_vs_fp32": figures_text(
                    ratio_figures(measured.rates["null"], measured.rates["fp32"])
                ),
                "rounds": len(measured.orders),
                "raw_rounds": json.dumps(measured.to_dict()),
            }
        )
        write_csv("casts", rows)
    intro = (
        "Per example, the layer-class (`--group-by type`) space two ways: `follow` (the "
        "default: only computing layers get a choice, shape and element-wise layers and "
        "normalisation take their input's dtype) and `independent` (every floating layer "
        "class a choice). Then one choice measured three ways in the same rounds (random "
        "order, blocks of at least 10 calls and 0.5 s, beside FP32 and a copy of it): the "
        "computing classes in bfloat16 with the others following; the same classes in "
        "bfloat16 with the others float32 (what the independent space gives that choice: "
        "a cast on each side of every layer between); and Keras's global `mixed_bfloat16`. "
        "Geometric mean of the per-round ratios (95% bootstrap interval).\n"
    )
    table = markdown_table(
        ["example", "dtype choices (follow / independent)", "computing classes",
         "follow vs FP32", "independent vs FP32", "global vs FP32", "follow vs independent",
         "FP32 copy", "rounds"],
        (
            [r["example"], f"{r['dims_follow']} / {r['dims_independent']}", r["computing"],
             r["follow_vs_fp32"], r["independent_vs_fp32"], r["global_vs_fp32"],
             r["follow_vs_independent"], r["fp32_copy_vs_fp32"], r["rounds"]]
            for r in rows
        ),
    )  # fmt: skip
    write_results("casts", rows, "The cast-aware space: follow against independent choices",
                  [intro, *table])  # fmt: skip


# Per example, the grouping whose dtype combinations at the user's own batch size and XLA
# setting are few enough to measure every one (at most 8) beside the probes' predictions.
COSTMODEL = {"wide_mlp": "type", "digits_cnn": "layer", "tiny_transformer": "type",
             "mobilenet_v2": "type"}  # fmt: skip
PROBE_TIME = 60.0


def _dtype_points(space: SearchSpace) -> list[dict[str, Any]]:
    """Every combination of the space's dtype parameters (the rest at FP32's values)."""
    fp32 = dict(space.baselines())["fp32"]
    groups = [p for p in space.choices() if p.startswith("dtype")]
    return [
        {**fp32, **dict(zip(groups, values, strict=True))}
        for values in itertools.product(*(space.choices()[g] for g in groups))
    ]


def costmodel() -> None:
    """The probes' cost model against every dtype combination measured side by side."""
    from precsearch.study.probe import predicted, run_probes

    rows, summary = [], []
    for name, group_by in COSTMODEL.items():
        with Worker(STUDIES / name / "model.py", WORK / "costmodel" / name, Budget()) as worker:
            worker.start()
            info = worker.model_info.to_dict()
            options = SpaceOptions(group_by=group_by, dtypes=["float32", "bfloat16"])
            space = SearchSpace(info, options, ["layer_dtypes"])
            record = run_probes(worker, space, PROBE_TIME, block=10)
            points = [p for p in _dtype_points(space) if p != dict(space.baselines())["fp32"]]
            measured = selection(worker, [space.policy(p) for p in points], 10, block=10)
        errors = []
        for i, params in enumerate(points):
            figures = ratio_figures(measured.rates[f"c{i}"], measured.rates["fp32"])
            guess = predicted(record, params)
            error = guess / figures["estimate"] - 1
            errors.append(abs(error))
            low = [k.removeprefix("dtype:") or "every layer" for k, v in params.items()
                   if k.startswith("dtype") and v == "bfloat16"]  # fmt: skip
            rows.append(
                {
                    "example": name,
                    "group_by": group_by,
                    "bfloat16": ", ".join(low),
                    "predicted": guess,
                    "measured": figures_text(figures),
                    "error": error,
                    "covered": figures["low"] <= guess <= figures["high"],
                }
            )
        summary.append(
            {
                "example": name,
                "probes": len(record["probes"]),
                "probe_s": record["seconds"],
                "probe_rounds": record["rounds"],
                "policies": len(points),
                "within_15": sum(e <= 0.15 for e in errors),
                "median_error": statistics.median(errors),
                "max_error": max(errors),
                "fp32_copy": figures_text(
                    ratio_figures(measured.rates["null"], measured.rates["fp32"])
                ),
                "probe_record": json.dumps(record),
                "raw_rounds": json.dumps(measured.to_dict()),
            }
        )
        write_csv("costmodel_policies", rows)
    intro = (
        "Per example, the probes as `precsearch run` takes them before its search (each "
        "dtype group alone in bfloat16, and all of them, timed against FP32 in interleaved "
        f"rounds for at most {PROBE_TIME:.0f} s), then every combination of the groups in "
        "bfloat16 at the user's batch size and XLA setting measured side by side in one "
        "worker (10 rounds in random orders beside FP32 and a copy of it). Predicted = the "
        "product of the groups' probe ratios; error = predicted / measured - 1; 'in "
        "interval': the prediction inside the measured ratio's 95% interval.\n"
    )
    head = markdown_table(
        ["example", "probes", "probe time", "policies", "within ±15%", "median error",
         "largest error", "FP32 copy"],
        (
            [r["example"], r["probes"], f"{r['probe_s']:.0f} s ({r['probe_rounds']} rounds)",
             r["policies"], f"{r['within_15']} of {r['policies']}", f"{r['median_error']:.0%}",
             f"{r['max_error']:.0%}", r["fp32_copy"]]
            for r in summary
        ),
    )  # fmt: skip
    table = markdown_table(
        ["example", "in bfloat16", "predicted", "measured", "error", "in interval"],
        (
            [r["example"], r["bfloat16"], f"{r['predicted']:.2f}x", r["measured"],
             f"{r['error']:+.0%}", "yes" if r["covered"] else "no"]
            for r in rows
        ),
    )  # fmt: skip
    write_results("costmodel", summary, "The probes' cost model against measured policies",
                  [intro, *head, "\n## Every policy\n", *table])  # fmt: skip
    write_csv("costmodel_policies", rows)


# digits_cnn by layer in the cast-aware space (its convolutions and hidden Dense get a
# choice), XLA and two batch sizes: small enough to measure every policy here.
WARMSTART = {"example": "digits_cnn", "group_by": "layer", "batch_sizes": [64, 256],
             "dimensions": ["layer_dtypes", "jit_compile", "batch_size"], "rounds": 3,
             "block": 5, "chunk": 16, "seeds": 5, "trials": (4, 8, 12, 20)}  # fmt: skip


def warmstart() -> None:
    """Search efficiency with and without the probes, replayed on an exhaustive table."""
    import optuna

    from precsearch.study.probe import predicted, predicted_best, rejection, run_probes

    cfg = WARMSTART
    with Worker(STUDIES / cfg["example"] / "model.py", WORK / "warmstart", Budget()) as worker:
        worker.start()
        info = worker.model_info.to_dict()
        options = SpaceOptions(group_by=cfg["group_by"], dtypes=["float32", "bfloat16"],
                               batch_sizes=cfg["batch_sizes"])  # fmt: skip
        space = SearchSpace(info, options, cfg["dimensions"])
        record = run_probes(worker, space, PROBE_TIME, block=10)
        choices = space.choices()
        names = list(choices)
        t0 = time.perf_counter()
        table = measure_every_policy(worker, space, cfg, "warmstart")
        points = [dict(zip(names, key, strict=True)) for key in table]
        speed = {key: figures["estimate"] for key, figures in table.items()}
        measure_s = time.perf_counter() - t0
    optimum = max(speed.values())
    distributions = {n: optuna.distributions.CategoricalDistribution(choices[n]) for n in names}

    def replay(sampler: str, trials: int, seed: int, probes: bool) -> tuple[float, int]:
        """The share of the optimum found within ``trials`` counted trials, as a study
        runs them (FP32 and the global recipe first; with the probes, the predicted best
        next and ruled-out policies answered from the probes, not counted)."""
        make = {"tpe": lambda: optuna.samplers.TPESampler(seed=seed, n_startup_trials=3),
                "random": lambda: optuna.samplers.RandomSampler(seed=seed)}  # fmt: skip
        study = optuna.create_study(direction="maximize", sampler=make[sampler]())
        for _, params in space.baselines():
            study.enqueue_trial(params)
        best = predicted_best(record, space) if probes else None
        if best is not None:
            study.enqueue_trial(best)
        counted, asked, answered, found = 0, 0, 0, 0.0
        seen: set[tuple] = set()
        while counted < trials and asked < 500:
            asked += 1
            trial = study.ask(distributions)
            key = tuple(trial.params[n] for n in names)
            if probes and rejection(record, trial.params):
                study.tell(trial, predicted(record, trial.params))
                answered += 1
                continue
            study.tell(trial, speed[key])
            if key in seen:  # a sampler's repeat: its figure stands, not a trial
                continue
            seen.add(key)
            counted += 1
            found = max(found, speed[key])
            if len(seen) == len(points) - answered_keys(probes):
                break  # every policy the probes allow was measured
        return found / optimum, answered

    allowed = [p for p in points if not rejection(record, p)]

    def answered_keys(probes: bool) -> int:
        """Policies the probes rule out (never measured in a replay with them)."""
        return len(points) - len(allowed) if probes else 0

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for sampler in ("tpe", "random"):
        for probes in (False, True):
            for trials in cfg["trials"]:
                runs = [replay(sampler, trials, seed, probes) for seed in range(cfg["seeds"])]
                shares = [share for share, _ in runs]
                rows.append(
                    {
                        "sampler": sampler,
                        "probes": probes,
                        "trials": trials,
                        "mean_share": statistics.mean(shares),
                        "min_share": min(shares),
                        "answered_by_probes": statistics.mean(n for _, n in runs),
                    }
                )
    fp32_key = tuple(dict(space.baselines())["fp32"][n] for n in names)
    ranked = sorted(speed.items(), key=lambda kv: -kv[1])
    intro = (
        f"Space: {cfg['example']}, `group_by={cfg['group_by']}` in the cast-aware space, "
        f"dimensions {', '.join(names)}: {len(points)} policies, every one measured against "
        f"FP32 (chunks of {cfg['chunk']}, {cfg['rounds']} rounds of at least {cfg['block']} "
        f"calls and 0.5 s; {measure_s:.0f} s). The probes were measured for real first "
        f"({len(record['probes'])} probes, {record['rounds']} rounds, {record['seconds']:.0f} s); "
        f"they ruled out {ruled_text(record)}. Each study is replayed as `precsearch run` runs "
        "one: FP32 and the global recipe first, then the sampler; with the probes the "
        "predicted-best policy comes third and a policy they rule out is answered from them "
        "(not counted as a trial), and so is a sampler's repeat of a policy it measured. "
        "Share = the best speedup found within N counted trials "
        f"over the table's best ({optimum:.2f}x; FP32 itself measured "
        f"{speed[fp32_key]:.2f}x, the noise of one entry; the best is "
        f"{summarize_policy(space.policy(dict(zip(names, ranked[0][0], strict=True))).to_dict())}"
        f" at batch {dict(zip(names, ranked[0][0], strict=True))['batch_size']}), over "
        f"{cfg['seeds']} seeds.\n"
    )
    table = markdown_table(
        ["sampler", "probes", "trials", "mean share", "worst seed",
         "proposals answered by the probes"],
        (
            [r["sampler"], "yes" if r["probes"] else "no", r["trials"], f"{r['mean_share']:.3f}",
             f"{r['min_share']:.3f}", f"{r['answered_by_probes']:.1f}"]
            for r in rows
        ),
    )  # fmt: skip
    write_results("warmstart", rows, "Search efficiency with the probes' warm start",
                  [intro, *table])  # fmt: skip


def ruled_text(record: dict[str, Any]) -> str:
    from precsearch.study.probe import XLA, ruled_out

    gone = ruled_out(record)
    return (
        ", ".join("XLA" if p == XLA else f"bfloat16 for {p.removeprefix('dtype:')}" for p in gone)
        or "nothing"
    )


def write_machine() -> None:
    """The machine the results come from, for the README's Results section."""
    hw = describe()
    machine = {**hw, "date": datetime.date.today().isoformat(), "versions": _versions()}
    (RESULTS / "machine.json").write_text(json.dumps(machine, indent=2) + "\n")


# The MobileNetV3Small-class study, with its own precsearch_config (16 trials,
# 120 steps at batch 32) and every default of `precsearch run`, confirmation included.
WALL = "mobilenet_v3_small"


def wall() -> None:
    """One whole study from start to end, as `precsearch run` does it: its wall time,
    where it went, and the answer."""
    name = WALL
    before = []
    if (RESULTS / "wall.csv").exists():  # the last run, kept beside: before and after a change
        (last,) = pd.read_csv(RESULTS / "wall.csv").to_dict("records")
        measured = (RESULTS / "wall.md").read_text().split("Measured ", 1)[-1].split(" (")[0]
        before = [
            f"\nThe previous run ({measured}): {last['wall_s']:.0f} s ({last['wall_s'] / 60:.1f} "
            f"min): probes {last['probe_s']:.0f} s, trials {last['trials_s']:.0f} s, rest "
            f"{last['rest_s']:.0f} s; overhead in trials {last['overhead_share']:.0%}; answer "
            f"{last['vs_fp32']}."
        ]
    shutil.rmtree(WORK / "wall" / name, ignore_errors=True)  # a fresh search
    t0 = time.perf_counter()
    result = precsearch.search(
        str(STUDIES / name / "model.py"), out=str(WORK / "wall"), study_name=name,
        progress=sys.stderr,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    study = result.study
    probes = study.user_attrs.get("probes") or {}
    results = ran_results(study.trials)
    phases, trial_total, share = time_split(results)
    probe_s = probes.get("seconds", 0.0)
    rest = (study.user_attrs.get("confirmation") or {}).get("seconds") or {}
    row = {
        "example": name,
        "wall_s": seconds,
        "probe_s": probe_s,
        "trials_s": trial_total,
        "rest_s": seconds - probe_s - trial_total,
        **{f"{phase}_s": rest.get(phase) for phase, _ in OUTSIDE},
        "answered_by_probes": sum(bool(t.user_attrs.get("probe_rejected")) for t in study.trials),
        "repeats": sum("duplicate_of" in t.user_attrs for t in study.trials),
        **phases,
        "overhead_share": share,
        **answer_fields(result),
    }
    intro = (
        f"`precsearch run studies/{name}/model.py` with every default (16 trials of 120 "
        "steps at batch 32, the probes, the confirmation), from a fresh study folder, in "
        "one process; wall time from start to the exported answer. 'rest' is what is "
        "neither the probes nor a trial: the confirmation, the export and the study's own "
        "start.\n"
    )
    best = "FP32" if row["best_is_fp32"] else row["best_policy"]
    table = markdown_table(
        ["wall", "probes", "trials", "rest", "trials run", "answered by the probes",
         "repeats", "overhead in trials", "answer", "batch", "XLA", "vs FP32", "FP32 copy"],
        [[f"{seconds:.0f} s ({seconds / 60:.1f} min)", f"{probe_s:.0f} s",
          f"{trial_total:.0f} s", f"{row['rest_s']:.0f} s", len(results),
          row["answered_by_probes"], row["repeats"], f"{share:.0%}", best,
          row["batch_size"], "on" if row["jit"] else "off", row["vs_fp32"],
          row["fp32_copy_vs_fp32"]]],
    )  # fmt: skip
    lines = [
        intro,
        *table,
        "",
        f"Trials: {row['statuses']}. " + time_summary(results, trial_total),
        "",
        outside_trials(study),
        "",
        f"Probes ({probes.get('rounds')} rounds): " + "; ".join(probe_lines(probes)) + ".",
        "",
        f"Verdict: {row['verdict']}.",
        *before,
    ]
    write_results("wall", [row], "A whole study's wall time: MobileNetV3Small", lines)


def readme() -> None:
    """Write the README's Results table from the result files."""
    from readme import update_readme

    update_readme()


STEPS = {
    "instrument": instrument,
    "quality": quality,
    "selection": selection_rates,
    "repeatability": repeatability,
    "efficiency": efficiency,
    "overhead": overhead,
    "scaling": scaling,
    "casts": casts,
    "costmodel": costmodel,
    "warmstart": warmstart,
    "wall": wall,
    "readme": readme,
}
ALL = ("instrument", "quality", "selection", "repeatability", "overhead", "readme")


def main() -> None:
    global RESULTS, LOAD_BEFORE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "step", choices=[*STEPS, "all"], help="'all' runs all but efficiency and scaling"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="where the result files go (default benchmarks/results: the README's; another "
        "kind of machine gets a folder of its own)",
    )
    args = parser.parse_args()
    RESULTS = args.results.resolve()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    RESULTS.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    for name, step in STEPS.items():
        if args.step == name or (args.step == "all" and name in ALL):
            LOAD_BEFORE = os.getloadavg()
            t0 = time.perf_counter()
            print(f"== {name}", file=sys.stderr, flush=True)
            step()
            print(
                f"== {name} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True
            )


if __name__ == "__main__":
    main()
