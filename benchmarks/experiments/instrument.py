"""The instrument's own noise: identical FP32 models of an example timed in random-order
rounds, every call kept, read with each block length and block estimator: the A/A noise
per round, the rounds a ±3% interval needs, any bias by copy or position (``instrument``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from pages import Pages, markdown_table

import precsearch.engine.instrument as timing
from experiments.shared import model_file
from precsearch.engine.problem import Problem
from precsearch.model_file import load_model_file

INSTRUMENT = {"example": "wide_mlp", "copies": 4, "seconds": 60.0, "blocks": (0.1, 0.25, 0.5, 1.0)}

ESTIMATORS = {
    "median": np.median,
    "p10": lambda a: np.percentile(a, 10),
    "mean": np.mean,
}


@dataclass(frozen=True)
class Calls:
    """Every call's seconds per copy and round, each copy's place in each round, the
    rounds every copy completed, a round's mean wall time and each copy's calls per block."""

    calls: dict[str, list[list[float]]]
    positions: dict[str, list[int]]
    rounds: int
    round_s: float
    calls_per_block: str


def instrument_noise(pages: Pages) -> None:
    """A/A noise by block length and block estimator, and any bias by copy or position."""
    cfg = INSTRUMENT
    problem = Problem(load_model_file(model_file(cfg["example"])))
    rows = []
    for block_s in cfg["blocks"]:
        recorded = _record_calls(problem, cfg["copies"], cfg["seconds"], block_s)
        rows += [_estimator_row(block_s, name, recorded) for name in ESTIMATORS]
    pages.write("instrument", rows, "The instrument's own noise (A/A)", _page(rows))


def _record_calls(problem: Problem, copies: int, seconds: float, block_s: float) -> Calls:
    """Identical FP32 models timed in rounds of random order for ``seconds``, as the
    confirmation times them, every call kept."""
    base = problem.baseline()
    models = [
        timing.prepare(timing.Timed(f"m{i}", problem.model_for(base, seed=0),
                                    problem.iterator(base.batch_size, seed=0),
                                    base.batch_size), block=10, warmup=3,
                       least_s=block_s)
        for i in range(copies)
    ]  # fmt: skip
    rng = np.random.default_rng(0)
    calls: dict[str, list[list[float]]] = {m.label: [] for m in models}
    positions: dict[str, list[int]] = {m.label: [] for m in models}
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for position, i in enumerate(rng.permutation(len(models))):
            model = models[i]
            timing.step(model.model, model.iterator)
            calls[model.label].append(
                [timing.step(model.model, model.iterator)[0] for _ in range(model.steps)]
            )
            positions[model.label].append(position)
    rounds = min(len(v) for v in calls.values())
    round_s = (time.perf_counter() - t0) / rounds
    steps = ", ".join(str(m.steps) for m in models)
    return Calls(calls, positions, rounds, round_s, steps)


def _estimator_row(block_s: float, name: str, recorded: Calls) -> dict[str, Any]:
    """The A/A figures of one block length read with one block estimator."""
    estimate = ESTIMATORS[name]
    rounds = recorded.rounds
    rates = {k: np.array([1 / estimate(b) for b in v[:rounds]]) for k, v in recorded.calls.items()}
    logs = {k: np.log(v / rates["m0"]) for k, v in rates.items() if k != "m0"}
    sd = float(np.mean([np.std(v, ddof=1) for v in logs.values()]))
    by_position: list[list[float]] = [[] for _ in recorded.calls]
    mean_round = np.exp(np.mean([np.log(r[:rounds]) for r in rates.values()], axis=0))
    for k, v in rates.items():
        for r in range(rounds):
            by_position[recorded.positions[k][r]].append(math.log(v[r] / mean_round[r]))
    return {
        "block_s": block_s,
        "estimator": name,
        "rounds": rounds,
        "round_s": recorded.round_s,
        "calls_per_block": recorded.calls_per_block,
        "aa_log_sd_per_round": sd,
        # The variance of the mean per second of rounds: lower is better.
        "variance_per_second": sd**2 * recorded.round_s,
        "rounds_for_3pct": math.ceil((1.96 * sd / 0.03) ** 2),
        "copies_vs_m0": ", ".join(f"{math.exp(v.mean()):.3f}" for v in logs.values()),
        "by_position_pct": ", ".join(
            f"{100 * (math.exp(np.mean(v)) - 1):+.1f}" for v in by_position
        ),
    }


def _page(rows: list[dict[str, Any]]) -> list[str]:
    cfg = INSTRUMENT
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
    return [intro, *table]
