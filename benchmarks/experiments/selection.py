"""The selection's error rates on real timings (``selection``): rounds of independently
built instances of real models recorded as a confirmation times them, then the
confirmation's decision replayed on them from random starts, with the product's rules.

An FP32 training beside copies of itself (no candidate is faster: any winner is a false
one), and beside the same model without a side branch that FP32's carries (a real gain of
about 10%, measured: branches 64/80/96/160 wide read 1.08-1.10x/1.12x/1.16x/1.17x in short
calibration runs on an AMX Xeon). The branch leaves the main layers' shapes alone: a
narrower MLP (960 against 1024 wide, 0.92x the work) read 1.35x on an AVX2 CPU, a kernel's
quirk rather than the work.

The decision is the confirmation's own (:func:`precsearch.study.confirm.confirm`): every
configuration as two instances (:func:`~precsearch.study.selection.instance_configs`),
the selection a screen at :data:`~precsearch.study.selection.SCREEN` over at most
:data:`~precsearch.study.selection.LOOKS` looks (:class:`~precsearch.study.selection.Sequential`),
then the winner repeated at :data:`~precsearch.study.selection.ALPHA` on fresh rounds of
new instances until :func:`~precsearch.study.selection.settled`, the between-instance
spread of both stages in the interval (:func:`~precsearch.study.verdict.report`). So that
instance offsets are in the replay, each session records a pool of instances per model
(built alike, one after another) and each study draws which instance plays which part
(FP32's timing model, its copy, each candidate's two, the fresh copy and the winner's two
new ones), never one instance in two parts. A study's time cap counts the recorded blocks
of the instances it uses. About 25 min on a 2-core CPU (12 and 15 instances, 100 rounds).
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from typing import Any

import numpy as np
from pages import Pages, markdown_table

import precsearch
from experiments.shared import model_file
from precsearch.engine.instrument import Timed, prepare, timed_rounds
from precsearch.engine.problem import Problem
from precsearch.records import Measurement, ModelSpec
from precsearch.stats import figures_text, instance_spread, pooled_figures
from precsearch.study.selection import (
    ALPHA,
    LOOKS,
    SCREEN,
    Sequential,
    instance_configs,
    measure_rounds,
    settled,
    spread_of,
)
from precsearch.study.verdict import report

SELECTION = {"rounds": 100, "studies": 200, "branch": 64, "candidates": 3, "seconds": 60.0}
# Instances recorded per model (side-branch width: count), enough for every part a
# study can give them: 8 in the selection and 3 new ones in the repeat.
POOLS = {"same": {64: 12}, "gain": {64: 10, 0: 5}}
RULE = (
    f"two instances per configuration, the selection a {SCREEN:.0%} screen over {LOOKS} "
    f"looks, the repeat at {ALPHA:.0%} on new instances"
)
FP32 = precsearch.Policy()
BF16 = precsearch.Policy(default="mixed_bfloat16")


def selection_rates(pages: Pages) -> None:
    """False winners and power of the confirmation's decision, on rounds of real models."""
    labels = [f"c{i}" for i in range(SELECTION["candidates"])]
    slow = SELECTION["branch"]  # FP32's model: with the side branch
    sessions = {
        "same": dict.fromkeys(labels, slow),
        "gain": {"c0": 0, **dict.fromkeys(labels[1:], slow)},
    }
    rows = [_session(name, branches) for name, branches in sessions.items()]
    pages.write("selection", rows, "The selection's error rates on real models", _page(rows))


def _session(name: str, branches: dict[str, int]) -> dict[str, Any]:
    """One recording of the session's instance pools, and the studies replayed on it."""
    cfg = SELECTION
    t0 = time.perf_counter()
    recording = _record_rounds(POOLS[name], cfg["rounds"], seed=len(name))
    wall = time.perf_counter() - t0
    starts = np.random.default_rng(7).integers(0, cfg["rounds"], size=cfg["studies"])
    outcomes = [_study(recording, branches, int(s), seed=n) for n, s in enumerate(starts)]
    groups = {b: [recording["rates"][x] for x in pool] for b, pool in _pools(recording).items()}
    spread = instance_spread(list(groups.values()))
    gain = pooled_figures(groups[0], groups[cfg["branch"]], spread) if 0 in groups else None
    blocks = [s for seconds in recording["seconds"].values() for s in seconds]
    return {
        "session": name,
        "rule": RULE,
        "c0_branch": branches["c0"],
        "instances": ", ".join(
            f"{len(g)} {f'with the {b}-wide branch' if b else 'without it'}"
            for b, g in groups.items()
        ),
        "rounds": cfg["rounds"],
        "block_s_median": float(np.median(blocks)),
        "wall_s": round(wall),
        "c0_vs_fp32_whole_recording": figures_text(gain) if gain else "-",
        "instance_sd_pct": round(100 * math.sqrt(spread[0]), 1),
        "instance_df": spread[1],
        "instances_vs_their_model": _offsets_text(list(groups.values())),
        "studies": cfg["studies"],
        "screened": sum(o["screened"] is not None for o in outcomes),
        "undecided": sum(o["undecided"] for o in outcomes),
        "any_winner": sum(o["answer"] is not None for o in outcomes),
        "c0_found": sum(o["answer"] == "c0" for o in outcomes),
        "recording": json.dumps(recording),
    }


def _pools(recording: dict[str, Any]) -> dict[int, list[str]]:
    """The recorded instances by model (side-branch width), in the order they were built."""
    pools: dict[int, list[str]] = {}
    for label, branch in recording["branch_of"].items():
        pools.setdefault(branch, []).append(label)
    return pools


def _offsets_text(groups: list[list[list[float]]]) -> str:
    """How far each instance read from its model's instances over the whole recording: the
    least and the most of its geometric-mean ratio to their per-round mean."""
    ratios = []
    for group in groups:
        logs = np.log(np.asarray(group, dtype=float))  # instances x rounds
        ratios += list(np.exp((logs - logs.mean(axis=0)).mean(axis=1)))
    return f"{min(ratios):.3f}-{max(ratios):.3f}x"


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


def _record_rounds(pools: dict[int, int], rounds: int, seed: int) -> dict[str, Any]:
    """Rounds of independently built instances (``pools``: side-branch width to how many),
    timed as a confirmation times them (random orders, blocks of at least 10 calls and
    0.5 s), with each block's wall time; ``branch_of`` says each instance's model."""
    configs, branch_of = [], {}
    for branch, count in pools.items():
        problem = Problem(_mlp_spec(branch))
        policy = problem.baseline()
        for n in range(count):
            label = f"b{branch}_{n}"
            model = problem.model_for(policy, seed=0)  # built anew: an instance of its own
            stream = problem.iterator(policy.batch_size, seed=0)
            config = Timed(label, model, stream, policy.batch_size)
            configs.append(prepare(config, block=10, warmup=3))
            branch_of[label] = branch
    rng = np.random.default_rng(seed)
    labels = list(branch_of)
    rates: dict[str, list[float]] = {label: [] for label in labels}
    seconds: dict[str, list[float]] = {label: [] for label in labels}
    orders = []
    for _ in range(rounds):
        order = [labels[i] for i in rng.permutation(len(labels))]
        for label in order:
            t0 = time.perf_counter()
            rates[label] += timed_rounds(configs, [[label]])[label]
            seconds[label].append(time.perf_counter() - t0)
        orders.append(order)
    return {"rates": rates, "seconds": seconds, "orders": orders, "branch_of": branch_of}


class _Replay:
    """An executor whose rounds are a recording's, in order from ``start``: each label a
    study times plays the recorded instance ``parts`` gives it. Its clock is the recorded
    time of the blocks handed out."""

    def __init__(self, recording: dict[str, Any], start: int, parts: dict[str, str]) -> None:
        self.recording, self.next, self.elapsed, self.parts = recording, start, 0.0, parts

    def clock(self) -> float:
        return self.elapsed

    def confirm(self, configs: list, orders: list, block: int) -> Measurement:
        rec, n = self.recording, len(orders)
        rounds = [(self.next + i) % len(rec["orders"]) for i in range(n)]
        self.next += n
        played = {label: self.parts[label] for label, _ in configs}
        self.elapsed += sum(rec["seconds"][x][r] for x in played.values() for r in rounds)
        rates = {label: [rec["rates"][x][r] for r in rounds] for label, x in played.items()}
        part_of = {x: label for label, x in played.items()}
        ran = [[part_of[x] for x in rec["orders"][r] if x in part_of] for r in rounds]
        return Measurement(rates=rates, orders=ran)


def _study(
    recording: dict[str, Any], branches: dict[str, int], start: int, seed: int
) -> dict[str, Any]:
    """One confirmation's decision on recorded rounds, as confirm() makes it: the
    selection from round ``start`` (each configuration two instances, the screen's three
    looks), then the winner repeated on the next rounds with new instances until settled.
    Which recorded instance plays which part is drawn from ``seed``. Returns the
    selection's winner (``screened``), whether it ended ``undecided`` without one, and the
    ``answer`` (``None``: FP32)."""
    rng = np.random.default_rng(seed)
    pools = _pools(recording)
    for pool in pools.values():
        rng.shuffle(pool)
    fp32 = SELECTION["branch"]
    parts = {"fp32": pools[fp32].pop(), "null": pools[fp32].pop()}
    for label, branch in branches.items():
        parts[label], parts[f"{label}#2"] = pools[branch].pop(), pools[branch].pop()
    replay = _Replay(recording, start, parts)
    configs = [("fp32", FP32), ("null", FP32), *((label, BF16) for label in branches)]
    sequential = Sequential(list(branches))
    selection = measure_rounds(replay, instance_configs(configs, "selection"), rng, 10,
                               SELECTION["seconds"], sequential, replay.clock)  # fmt: skip
    chosen = sequential.selection
    outcome = {"screened": chosen.winner, "answer": None,
               "undecided": chosen.winner is None and not chosen.decided}  # fmt: skip
    if chosen.winner is None:
        return outcome
    new = pools[branches[chosen.winner]]
    parts.update({"null": pools[fp32].pop(), "best": new.pop(), "best#2": new.pop()})
    configs = instance_configs([("fp32", FP32), ("null", FP32), ("best", BF16)], "fresh")
    fresh = measure_rounds(replay, configs, rng, 10, SELECTION["seconds"], settled, replay.clock)
    best, _ = report(fresh, BF16, FP32, {}, spread=spread_of(selection, fresh))
    outcome["answer"] = chosen.winner if best["answer"] == "winner" else None
    return outcome


def _page(rows: list[dict[str, Any]]) -> list[str]:
    cfg = SELECTION
    same, gain = rows
    intro = (
        f"The confirmation's decision ({RULE}; each stage at most {cfg['seconds']:.0f} s of "
        "rounds) replayed on rounds of real models recorded here: wide_mlp with a "
        f"{cfg['branch']}-wide side branch as FP32's training, its copy and "
        f"{cfg['candidates']} candidates, timed as a confirmation times them "
        f"({cfg['rounds']} rounds, random orders, blocks of at least 10 calls and 0.5 s). "
        "Each session records a pool of independently built instances; each study draws "
        "which instance plays which part (FP32 and its copy, each candidate's two, the new "
        "copy and the winner's two new ones in the repeat). In 'same' every candidate is "
        "the FP32 model: any winner is a false one. In 'gain' candidate c0 is the same MLP "
        "without the branch (a gain of about 10%), its advantage measured over the whole "
        "recording with every instance, their spread in the interval. Each study starts at "
        f"a random round ({cfg['studies']} studies); they share the session's instances and "
        "overlap in rounds, so they are not independent: the rates over independent "
        "studies, instance offsets drawn anew, are the simulations in "
        "`tests/test_selection.py`. 'instance sd' is the spread of an instance's fixed "
        "offset (`stats.instance_spread`), 'instances' how far each read from its model's "
        "others over the whole recording. 'screened': the selection crowned a candidate; "
        "'answer': it also repeated. The raw rounds are in `selection.csv`.\n"
    )
    table = markdown_table(
        ["session", "instances", "c0 vs FP32 (whole recording)", "instance sd",
         "instances vs their model", "block", "studies", "screened", "undecided",
         "a winner as answer", "c0 the answer"],
        (
            [r["session"], r["instances"], r["c0_vs_fp32_whole_recording"],
             f"{r['instance_sd_pct']}% ({r['instance_df']} df)", r["instances_vs_their_model"],
             f"{r['block_s_median']:.2f} s", r["studies"], r["screened"], r["undecided"],
             r["any_winner"], r["c0_found"]]
            for r in rows
        ),
    )  # fmt: skip
    summary = (
        f"\nFalse winners: {same['any_winner']}/{same['studies']} studies "
        f"({same['any_winner'] / same['studies']:.1%}; target at most {ALPHA:.0%}); the "
        f"screen alone crowned one in {same['screened']}. Power: the "
        f"{gain['c0_vs_fp32_whole_recording']} candidate the answer in {gain['c0_found']}/"
        f"{gain['studies']} studies ({gain['c0_found'] / gain['studies']:.0%}; target at "
        "least 80% for a 10% gain)."
    )
    return [intro, *table, summary]
