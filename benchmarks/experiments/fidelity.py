"""The quality test's rates (issue 33): simulated, and FP32 judged as a candidate on
real runs of the bundled studies at data-order seeds held out from its noise runs.

Per study, one process trains a pool of FP32 runs of the user's training (its own steps
and batch size, from the same initial weights, one per data-order seed: 7 blocks of
``CANDIDATE_RUNS``); each block is the candidate once, against the ``Budget().ref_seeds``
runs after it (other blocks, cyclically: held out from the candidate, shared between
judgments, which makes their verdicts correlate a little), judged by the real
:func:`precsearch.engine.fidelity.judge`. The simulation runs the same judge on normal
noise. These are quality runs, not timings, but they run alone all the same.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Any

import numpy as np
from pages import ROOT, Pages, markdown_table
from scipy import stats

from precsearch.engine.fidelity import assess, judge, stated_rates, window_mean
from precsearch.engine.problem import Problem
from precsearch.engine.references import CANDIDATE_RUNS, References
from precsearch.model_file import load_model_file
from precsearch.records import Budget, Fidelity, Reference, TrialResult

STUDIES = ("digits_cnn", "wide_mlp", "tutorial_cnn")
JUDGMENTS = 7  # per study: 21 real judgments of FP32 as a candidate
SIMULATED = 4000  # studies per simulated rate


def fidelity(pages: Pages) -> None:
    """Simulated rates and real FP32-as-a-candidate judgments, written to fidelity.md."""
    n = Budget().ref_seeds
    simulated = _simulated(n)
    rows: list[dict[str, Any]] = []
    for name in STUDIES:
        rows += _study(name, n)
    worse = sum(r["called_worse"] for r in rows)
    pages.write("fidelity", rows, "The quality test: false 'trains worse' and power",
                _lines(simulated, rows, worse, n), machine=False)  # fmt: skip


def _judged(fp32: Reference, candidate: list[int], pool: Reference) -> tuple[str, str, float]:
    """FP32's runs ``candidate`` (indices into ``pool``) judged against ``fp32``."""
    samples, end = pool.samples(), pool.span()
    first = candidate[0]
    val = {"loss": pool.val_loss[first], "metric": pool.val_metric[first]}
    trial = TrialResult(policy={}, curve={"samples": samples, "loss": pool.curves[first]}, val=val)
    trial.numerics = {"nonfinite_step": None, "runs": [
        {"seed": pool.seeds[i], "loss": window_mean(samples, pool.curves[i], end),
         "val_loss": pool.val_loss[i], "val_metric": pool.val_metric[i], "nonfinite_step": None}
        for i in candidate[1:]]}  # fmt: skip
    status, reason, gap, _ = judge(trial, fp32, Fidelity())
    return status, reason, gap


def _subset(pool: Reference, indices: list[int]) -> Reference:
    return dataclasses.replace(
        pool,
        curves=[pool.curves[i] for i in indices],
        val_loss=[pool.val_loss[i] for i in indices],
        val_metric=[pool.val_metric[i] for i in indices],
        seeds=[pool.seeds[i] for i in indices],
    )


def _study(name: str, n: int) -> list[dict[str, Any]]:
    """A pool of FP32 runs of one study, split into disjoint judgments."""
    t0 = time.perf_counter()
    problem = Problem(load_model_file(ROOT / "studies" / name / "model.py"))
    budget = Budget(steps=int(problem.spec.config.get("steps", 60)))
    m = CANDIDATE_RUNS
    pool = References(problem).get(problem.baseline(), budget, range(1, JUDGMENTS * m + 1))
    seconds = time.perf_counter() - t0
    print(f"{name}: {JUDGMENTS * m} FP32 runs in {seconds:.0f} s", file=sys.stderr, flush=True)
    rows = []
    for j in range(JUDGMENTS):
        # The candidate: block j of the pool; the noise: the n runs after it (cyclically).
        candidate = list(range(j * m, (j + 1) * m))
        fp32 = [((j + 1) * m + i) % (JUDGMENTS * m) for i in range(n)]
        noise = _subset(pool, fp32)
        status, reason, gap = _judged(noise, candidate, pool)
        judging = [figure for figure, why in assess(noise).items() if not why]
        rows.append({
            "study": name, "steps": budget.steps, "judgment": j,
            "fp32_seeds": " ".join(str(pool.seeds[i]) for i in fp32),
            "candidate_seeds": " ".join(str(pool.seeds[i]) for i in candidate),
            "judging": " ".join(judging), "gap": round(gap, 3) if math.isfinite(gap) else None,
            "called_worse": status != "ok", "reason": reason,
            "pool_seconds": round(seconds, 1),
        })  # fmt: skip
    return rows


def _simulated(n: int) -> dict[str, float]:
    """The real judge on normal noise: FP32 at held-out seeds, and a candidate 2 noise
    units (FP32's sd between seeds) worse, both with ``CANDIDATE_RUNS`` runs."""
    rng = np.random.default_rng(33)
    sd, counts = 0.05, {0.0: 0, 2.0: 0}
    seeds = list(range(1, n + 1))
    for shift in counts:
        for _ in range(SIMULATED):
            finals = 1.0 + rng.normal(0, sd, size=n)
            ref = Reference(batch_size=32, lr_rule="none", steps=8, seeds=seeds,
                            curves=[[2.0] * 6 + [f, f] for f in finals],
                            val_loss=[None] * n, val_metric=[None] * n)  # fmt: skip
            mine = 1.0 + shift * sd + rng.normal(0, sd, size=CANDIDATE_RUNS)
            trial = TrialResult(policy={}, curve={"samples": ref.samples(),
                                                  "loss": [2.0] * 6 + [mine[0]] * 2})  # fmt: skip
            trial.numerics = {"nonfinite_step": None, "runs": [
                {"seed": 100 + i, "loss": v, "nonfinite_step": None}
                for i, v in enumerate(mine[1:])]}  # fmt: skip
            counts[shift] += judge(trial, ref, Fidelity())[0] != "ok"
    return {"false": counts[0.0] / SIMULATED, "power": counts[2.0] / SIMULATED}


def _interval(k: int, total: int) -> str:
    ci = stats.binomtest(k, total).proportion_ci(0.95)
    return f"{k}/{total} ({k / total:.1%}; 95% CI {ci.low:.1%}-{ci.high:.1%})"


def _lines(
    simulated: dict[str, float], rows: list[dict[str, Any]], worse: int, n: int
) -> list[str]:
    m = CANDIDATE_RUNS
    one, three = stated_rates(n, m, 1, 0.05), stated_rates(n, m, 3, 0.05)
    old = stated_rates(3, 1, 1, 0.05)
    table = markdown_table(
        ["study", "steps", "judgments", "figures that judge", "called worse", "gaps", "pool s"],
        [[s, r[0]["steps"], len(r), r[0]["judging"] or "none",
          sum(x["called_worse"] for x in r),
          ", ".join("-" if x["gap"] is None else f"{x['gap']:.2f}" for x in r),
          r[0]["pool_seconds"]]
         for s in STUDIES if (r := [x for x in rows if x["study"] == s])],
    )  # fmt: skip
    sims = SIMULATED
    return [
        f"The test: {n} FP32 runs (data-order seeds) measure the noise; the candidate is "
        f"its {m} runs on seeds of its own (seed 0 and two from its policy); one-sided, "
        "the difference of the means against `t(1 - alpha/k, n - 1) * sd * sqrt(1/m + 1/n)`"
        " (k figures judge; alpha 5%). A noise unit is FP32's sd between seeds.",
        "",
        "## Simulated (normal noise, the real judge, one figure)",
        "",
        f"- FP32 judged as a candidate at held-out seeds, called worse: "
        f"{_interval(round(simulated['false'] * sims), sims)}; stated at most "
        f"{one['false_rejection']:.0%}.",
        f"- A candidate 2 noise units worse, caught: "
        f"{_interval(round(simulated['power'] * sims), sims)}; stated {one['power']:.1%} "
        "(the noncentral t).",
        f"- With three figures judging (Bonferroni), a candidate 2 units worse on one of them "
        f"is caught {three['power']:.1%} of the time (stated); false 'worse' at most 5%.",
        f"- Before: 3 FP32 runs and one candidate run on seed 0 caught it {old['power']:.1%} of "
        f"the time; one candidate run cannot reach 80% against any number of FP32 runs "
        f"({stated_rates(10_000, 1, 1, 0.05)['power']:.1%} at 10,000).",
        "",
        "## Real runs: FP32 at held-out seeds judged as a candidate",
        "",
        f"Each study's own steps and batch size; a pool of {JUDGMENTS * m} FP32 runs per "
        f"study, each block of {m} judged once as the candidate against the {n} runs after "
        f"it (held out from it; shared between judgments). Called worse: "
        f"{_interval(worse, len(rows))}.",
        "",
        *table,
    ]
