"""The selection's error rates on real timings (``selection``): rounds of real models
recorded as a confirmation times them, then the confirmation's decision replayed on them
from random starts.

An FP32 training beside copies of itself (no candidate is faster: any winner is a false
one), and beside the same model without a side branch that FP32's carries (a real gain of
about 10%, measured: branches 64/80/96/160 wide read 1.08-1.10x/1.12x/1.16x/1.17x in short
calibration runs on an AMX Xeon). The branch leaves the main layers' shapes alone: a
narrower MLP (960 against 1024 wide, 0.92x the work) read 1.35x on an AVX2 CPU, a kernel's
quirk rather than the work.
"""

from __future__ import annotations

import importlib.util
import json
import time
from typing import Any

import numpy as np
from pages import Pages, markdown_table

import precsearch
from experiments.shared import model_file, vs_fp32
from precsearch.engine.instrument import Timed, prepare, timed_rounds
from precsearch.engine.problem import Problem
from precsearch.records import Measurement, ModelSpec
from precsearch.stats import figures_text
from precsearch.study.selection import choose, measure_rounds
from precsearch.study.verdict import report

SELECTION = {"rounds": 150, "studies": 200, "branch": 64, "candidates": 3}


def selection_rates(pages: Pages) -> None:
    """False winners and power of the selection, on rounds of real models."""
    cfg = SELECTION
    labels = [f"c{i}" for i in range(cfg["candidates"])]
    slow = cfg["branch"]  # FP32's model: with the side branch
    sessions = {
        "same": {"fp32": slow, "null": slow, **dict.fromkeys(labels, slow)},
        "gain": {"fp32": slow, "null": slow, "c0": 0, **dict.fromkeys(labels[1:], slow)},
    }
    rows = [_session(name, branches, labels) for name, branches in sessions.items()]
    pages.write("selection", rows, "The selection's error rates on real models", _page(rows))


def _session(name: str, branches: dict[str, int], labels: list[str]) -> dict[str, Any]:
    """One recording, and the studies replayed on it."""
    cfg = SELECTION
    t0 = time.perf_counter()
    recording = _record_rounds(branches, cfg["rounds"], seed=len(name))
    wall = time.perf_counter() - t0
    starts = np.random.default_rng(7).integers(0, cfg["rounds"], size=cfg["studies"])
    answers = [_study(recording, int(start), labels) for start in starts]
    return {
        "session": name,
        "c0_branch": branches["c0"],
        "rounds": cfg["rounds"],
        "round_s_median": float(np.median(recording["seconds"])),
        "wall_s": round(wall),
        "c0_vs_fp32_whole_recording": figures_text(vs_fp32(recording["rates"], "c0")),
        "fp32_copy_whole_recording": figures_text(vs_fp32(recording["rates"], "null")),
        "studies": cfg["studies"],
        "any_winner": sum(a is not None for a in answers),
        "c0_found": sum(a == "c0" for a in answers),
        "recording": json.dumps(recording),
    }


def _mlp_spec(branch: int) -> ModelSpec:
    """wide_mlp's model and data; with ``branch``, a side branch of that width from the
    first hidden layer into the logits as well (extra work in every step)."""
    module_spec = importlib.util.spec_from_file_location(
        f"wide_mlp_{branch}", model_file("wide_mlp")
    )
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


def _page(rows: list[dict[str, Any]]) -> list[str]:
    cfg = SELECTION
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
    return [intro, *table, summary]
