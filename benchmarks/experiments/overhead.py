"""Overhead (``overhead``): where a trial's wall time goes, summed over the trials of a
fresh search per example: worker start, import, set-up, FP32 references, build, trace,
warm-up, measured blocks, training, evaluation. The last run's figures stay beside."""

from __future__ import annotations

from typing import Any

from pages import Pages, markdown_table, replaced_line

import precsearch
from experiments.shared import WORK, fresh_search, study_time
from precsearch.records import Budget
from precsearch.results.report import PHASES as TIMED_PHASES

# A trial's phases as ``TrialResult.timings`` names them: the overhead files' columns.
PHASES = tuple(key for _, keys in TIMED_PHASES for key in keys)

# A fresh search per example in benchmarks/work/overhead/, with its budget.
OVERHEAD = {
    "wide_mlp": {"trials": 8},
    "mobilenet_v2": {"trials": 6, "steps": 30},
}

INTRO = (
    "Summed over the trials of one fresh search per example (duplicates and trials "
    "the probes answered excluded, no confirmation; the probes themselves are in "
    "`costmodel.md`): wide_mlp with the default space (8 trials), MobileNetV2 (6 "
    "trials, 30 steps). Overhead = everything but the measured blocks "
    "and the rest of the training. `reference` = the FP32 runs of the user's training "
    f"({Budget.ref_seeds} data-order seeds, `--fp32-runs`, once), one FP32 run per new "
    "batch size and XLA setting (the precision-only diagnostic) and the FP32 timing "
    "model; `own_seeds` = each candidate's untimed runs on data-order seeds of its own "
    "(the quality test's, as many as its power needs); worker start, import and set-up "
    "are paid once per worker (one per study here) and charged to its first trial.\n"
)


def overhead(pages: Pages) -> None:
    """A fresh search per example, and where its trials' time went."""
    previous = pages.previous("overhead")
    rows = []
    for name, budget in OVERHEAD.items():
        _, wall = fresh_search("overhead", name, confirm_top=0, **budget)
        study = precsearch.load_study(WORK / "overhead" / name).study
        spent = study_time(study)
        rows.append(
            {
                "example": name,
                "study": f"overhead/{name}",
                "trials": len(spent.results),
                "total_s": spent.trials_s,
                **spent.phases,
                "overhead_share": spent.overhead_share,
                "study_wall_s": wall,
                "probe_s": spent.probe_s,
                "answered_by_probes": spent.answered_by_probes,
            }
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
    pages.write(
        "overhead",
        rows,
        "Overhead: where a trial's wall time goes",
        [INTRO, *table, *replaced_line(previous, _row)],
    )


def _row(r: dict[str, Any]) -> str:
    """One row of the previous run, in words."""
    return (
        f"{r['example']} {r['trials']} trials in {r['total_s']:.0f} s, overhead "
        f"{r['overhead_share']:.0%}"
    )
