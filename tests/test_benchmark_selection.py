"""benchmarks/experiments/selection.py replays the product's own decision: run here on a
simulated recording (the real one times wide_mlp for about 25 min), so that a change of
the selection's rules or API breaks CI rather than a benchmark run half an hour in."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


@pytest.fixture
def selection(monkeypatch):
    """The experiment's module as ``run.py`` imports it, its recording simulated: every
    independently built instance off by a fixed 2% sd offset, 5% noise per block and a
    drift per round; the branchless model 10% faster."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    module = importlib.import_module("experiments.selection")

    def simulated(pools: dict[int, int], rounds: int, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        branch_of = {f"b{b}_{n}": b for b, count in pools.items() for n in range(count)}
        offset = {label: rng.normal(0, 0.02) for label in branch_of}
        labels = list(branch_of)
        rates = {label: [] for label in labels}
        orders = []
        for _ in range(rounds):
            drift = rng.normal(0, 0.05)
            order = [labels[i] for i in rng.permutation(len(labels))]
            for label in order:
                speed = 1.1 if branch_of[label] == 0 else 1.0
                noise = drift + offset[label] + rng.normal(0, 0.05)
                rates[label].append(1e4 * speed * math.exp(noise))
            orders.append(order)
        seconds = {label: [0.5] * rounds for label in labels}
        return {"rates": rates, "seconds": seconds, "orders": orders, "branch_of": branch_of}

    monkeypatch.setattr(module, "_record_rounds", simulated)
    monkeypatch.setitem(module.SELECTION, "studies", 40)
    return module


class Pages:
    def write(self, name, rows, title, lines):
        self.name, self.rows, self.lines = name, rows, lines


def test_the_replay_runs_the_products_rules_on_instances_it_never_shares(selection):
    pages = Pages()
    selection.selection_rates(pages)
    same, gain = pages.rows
    assert (same["session"], gain["session"]) == ("same", "gain")
    assert same["rule"] == selection.RULE and "20% screen" in selection.RULE
    # The selection is a screen: what it crowns among FP32's copies the repeat drops.
    assert same["any_winner"] <= same["screened"] and same["any_winner"] <= 2
    assert gain["c0_found"] >= 0.8 * gain["studies"]
    assert gain["c0_vs_fp32_whole_recording"].startswith("1.1")
    assert any("False winners" in line for line in pages.lines)


def test_each_part_of_a_study_is_an_instance_of_its_own(selection, monkeypatch):
    played: list[dict[str, str]] = []
    replay = selection._Replay
    monkeypatch.setattr(
        selection,
        "_Replay",
        lambda rec, start, parts: played.append(parts) or replay(rec, start, parts),
    )
    recording = selection._record_rounds(selection.POOLS["gain"], 100, seed=1)
    branches = {"c0": 0, "c1": 64, "c2": 64}
    for seed in range(30):
        selection._study(recording, branches, start=seed, seed=seed)
    for parts in played:  # filled in place: the repeat's new instances too
        assert len(set(parts.values())) == len(parts) >= 8
        assert all(recording["branch_of"][parts[x]] == 0 for x in ("c0", "c0#2"))
