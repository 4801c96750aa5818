"""Repeatability: the whole confirmation of a quality study run twice, in two worker
processes at two times; the same answer twice is the test (``repeatability``). It reads
the studies that the quality experiment leaves in ``benchmarks/work/quality/``."""

from __future__ import annotations

import time
from typing import Any

from pages import Pages, markdown_table

import precsearch
from experiments.shared import FP32_ANSWER, WORK, fp32_copy_fields, started_worker
from precsearch.records import Budget, Confirmation
from precsearch.results.report import summarize_policy
from precsearch.stats import figures_text
from precsearch.stored import study_record
from precsearch.study.confirm import confirm

REPEATABILITY = ("wide_mlp", "digits_cnn", "mobilenet_v2")

INTRO = (
    "The whole confirmation (selection, then fresh rounds) of each policy-quality study "
    "run twice: two separate worker processes, 30 s apart, each with its own round "
    "orders, the default time caps. Same answer twice is the test; the figures are "
    "geometric means (95% interval) over the fresh rounds.\n"
)


def repeatability(pages: Pages) -> None:
    """The whole confirmation of a quality study, twice, in two worker processes."""
    rows = []
    for name in REPEATABILITY:
        folder = WORK / "quality" / name
        study = precsearch.load_study(folder).study
        budget = Budget(**study_record(study, "budget"))
        for repeat in range(2):
            if repeat:
                time.sleep(30)  # a different time, as well as a different process
            with started_worker(name, folder / "work", budget) as worker:
                record = confirm(study, worker, budget, seed=100 + repeat)
            rows.append(_row(name, repeat + 1, record))
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
    pages.write("repeatability", rows, "Repeatability of the confirmation", [INTRO, *table])


def _row(name: str, run: int, record: Confirmation) -> dict[str, Any]:
    """One confirmation's answer, as the table shows it."""
    return {
        "example": name,
        "run": run,
        "answer": "FP32" if record.best_is_fp32 else f"trial {record.best_trial}",
        "answer_policy": summarize_policy(record.best_policy),
        "vs_fp32": (
            FP32_ANSWER if record.best_is_fp32 else figures_text(record.best["speedup_vs_fp32"])
        ),
        **fp32_copy_fields(record.null_vs_fp32),
        "rounds": f"{record.rounds['selection']}+{record.rounds['fresh']}",
        "winners": ", ".join(str(c["trial"]) for c in record.candidates if c["wins"]) or "none",
        "verdict": record.verdict,
    }
