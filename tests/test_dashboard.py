"""optuna-dashboard, started on loopback as its users start it, shows a precsearch study
as precsearch does: the objectives by name, every trial, the feasible front."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest

from precsearch import load_study
from precsearch.results.report import pareto_rows
from precsearch.stored import is_feasible, is_repeat, named_constraints, set_constraints


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dashboard_study(journal: Path, name: str) -> dict:
    """The dashboard's own API answer for study ``name`` of ``journal``."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("optuna-dashboard")), str(journal),
               "--host", "127.0.0.1", "--port", str(port), "--quiet"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                url = f"http://127.0.0.1:{port}/api/studies"
                with urllib.request.urlopen(url, timeout=5) as response:
                    studies = json.load(response)["study_summaries"]
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "optuna-dashboard did not answer in 60 s"
                time.sleep(0.2)
        (study_id,) = [s["study_id"] for s in studies if s["study_name"] == name]
        url = f"http://127.0.0.1:{port}/api/studies/{study_id}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)
    finally:
        server.terminate()
        server.wait(timeout=30)


def plotted_front(shown: dict) -> list[int]:
    """The front of the dashboard's Pareto-front plot: its page splits the trials by their
    ``constraints`` list (feasible: every value ≤ 0) and draws the front of the feasible
    ones. (Its API's ``best_trials`` ignores constraints in 0.21.)"""
    signs = [1 if d == "maximize" else -1 for d in shown["directions"]]
    feasible = [
        t
        for t in shown["trials"]
        if t["state"] == "Complete" and all(c <= 0 for c in t["constraints"])
    ]

    def dominates(a: dict, b: dict) -> bool:
        pairs = [(s * x, s * y) for s, x, y in zip(signs, a["values"], b["values"], strict=True)]
        return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)

    return sorted(t["number"] for t in feasible if not any(dominates(o, t) for o in feasible))


def test_the_dashboard_front_leaves_out_what_precsearch_calls_infeasible(tmp_path):
    """A trial fast but unlike FP32 dominates every feasible one on the two objectives:
    the dashboard's plotted front must still leave it out, as Optuna's best_trials does.
    A trial stopped as too slow has no gap: inf, which neither the dashboard nor Optuna's
    own Pareto plot draws, so it stretches no axis."""
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    journal = tmp_path / "study.journal"
    storage = JournalStorage(JournalFileBackend(str(journal)))
    study = optuna.create_study(
        study_name="front", storage=storage, directions=["maximize", "minimize"]
    )
    measured = {  # speedup, gap, fidelity constraint
        "fast_unlike_fp32": (2.0, 0.1, 3.0),
        "fp32": (1.0, 0.2, -0.8),
        "bf16": (1.3, 0.5, -0.5),
        "too_slow": (0.3, math.inf, 1.0),
    }

    def objective(trial):
        speedup, gap, constraint = measured[trial.suggest_categorical("policy", list(measured))]
        set_constraints(trial, {"fidelity": constraint})
        return speedup, gap

    for policy in measured:
        study.enqueue_trial({"policy": policy})
    study.optimize(objective, n_trials=len(measured))
    assert [named_constraints(t) for t in study.trials] == [
        {"fidelity": c} for _, _, c in measured.values()
    ]
    assert [is_feasible(t) for t in study.trials] == [False, True, True, False]

    shown = dashboard_study(journal, "front")
    assert [t["constraints"] for t in shown["trials"]] == [[3.0], [-0.8], [-0.5], [1.0]]
    assert shown["trials"][3]["values"] == [0.3, "inf"]
    assert plotted_front(shown) == sorted(t.number for t in study.best_trials) == [1, 2]
    figure = json.loads(optuna.visualization.plot_pareto_front(study).to_json())
    gaps = [y for trace in figure["data"] for y in trace["y"]]
    assert max(y for y in gaps if y is not None) == 0.5 and gaps.count(None) == 1


@pytest.mark.slow
def test_the_dashboard_shows_a_precsearch_run_as_precsearch_shows_it(tiny_study):
    folder, _, _ = tiny_study
    study = load_study(folder).study
    shown = dashboard_study(folder / "study.journal", study.study_name)
    assert shown["objective_names"] == ["speedup", "fidelity_gap"]
    assert len(shown["trials"]) == len(study.trials)
    front = plotted_front(shown)
    assert front == sorted(t.number for t in study.best_trials)
    # precsearch's table leaves out a sampler's repeats of a measured policy.
    rows = sorted(row["trial"] for row in pareto_rows(study))
    assert rows == [n for n in front if not is_repeat(study.trials[n])]
