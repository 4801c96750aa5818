"""Policy quality: for each example study, a search with a budget sized for a 2-core CPU
and its confirmed answer against the user's own FP32 training (``policy_quality``)."""

from __future__ import annotations

from typing import Any

from pages import Pages, markdown_table

from experiments.shared import answer_fields, fresh_search
from precsearch.records import Budget

# Budgets sized for a 2-core CPU; each is stated in the results.
QUALITY = {
    "wide_mlp": {"trials": 10},
    "digits_cnn": {"trials": 10},
    "tiny_transformer": {"trials": 10},
    "tutorial_cnn": {"trials": 6, "steps": 30},
    "mobilenet_v2": {"trials": 6, "steps": 30},
    "overflow_trap": {"trials": 8, "group_by": "layer", "watchdog": 100.0},
}

INTRO = (
    "Each example: a search with the stated budget (default steps from its "
    "`precsearch_config` unless given; every trial trains the same number of examples, "
    f"judged one-sided against {Budget.ref_seeds} FP32 runs of the user's own training with "
    "held-out data-order seeds, at equal samples, on 3-4 runs of its own, as many as 80% "
    "power needs), then the confirmation: "
    "the top 3 feasible candidates (and the global recipe, if feasible), each timed as "
    "two independently built instances, re-measured round by round (blocks of at least "
    "10 calls and 0.5 s, a random order each round, in at most three looks, at most "
    "60 s) beside FP32 and a second copy of FP32; the selection is a screen at 20% "
    "(Bonferroni over the candidates, spent over the looks); the winner must repeat on "
    "fresh rounds of new instances (one-sided 5%, at most 60 s more), where its figures "
    "come from, beside every simpler policy between it and FP32 (each part it changes: "
    "low precision, batch size, XLA, stays only if what it adds, the others kept, passes "
    "that test too) and the peers. Ratios are samples/s within a round: geometric mean, "
    "Student-t 95% interval on log ratios with the between-instance spread in it. 'FP32 "
    "copy' is the instrument's own error (the A/A test) in the fresh rounds; 'error' is "
    "the farthest its interval reaches from 1; 'instance sd' its instance part, how far "
    "an instance's own offset moves it (pooled over every configuration's two "
    "instances). 'To FP32 quality' is the wall time to the loss every FP32 run reached, "
    "FP32's over the answer's. The raw per-round rates of both phases are in "
    "`policy_quality.csv` (`raw_rounds`).\n"
)


def policy_quality(pages: Pages) -> None:
    """A fresh search of each example, then the page of their confirmed answers."""
    rows = []
    for name, budget in QUALITY.items():
        result, seconds = fresh_search("quality", name, **budget)
        rows.append(
            {
                "example": name,
                "budget": ", ".join(f"{k}={v}" for k, v in budget.items()),
                **answer_fields(result),
                "wall_s": round(seconds),
            }
        )
        pages.write_csv("policy_quality", rows)  # so far, should a later example fail
    pages.write(
        "policy_quality",
        rows,
        "Policy quality: the found policy against your own FP32 training",
        [
            INTRO,
            *_table(rows),
            "\n## Verdicts, including every loss\n",
            *(_verdict(r) for r in rows),
        ],
    )


def _table(rows: list[dict[str, Any]]) -> list[str]:
    cells = []
    for r in rows:
        gap = f"{r['fidelity_gap']:.2f}" if r["fidelity_gap"] is not None else "-"
        best = "FP32" if r["best_is_fp32"] else r["best_policy"]
        cells.append(
            [r["example"], r["budget"], best, r["batch_size"], "on" if r["jit"] else "off",
             r["vs_fp32"], r["parts"], r["left_out"], r["time_to_quality"],
             r["global_peer"], r["rewrite_peer"], r["fp32_copy_vs_fp32"],
             f"±{r['instrument_error_pct']}%", f"{r['instance_sd_pct']}%",
             f"{r['selection_rounds']}+{r['fresh_rounds']}",
             gap, f"{r['wall_s']} s"]
        )  # fmt: skip
    columns = ["example", "budget", "answer", "batch", "XLA", "vs FP32", "each part adds",
               "left out", "to FP32 quality", "global recipe", "TF graph rewrite",
               "FP32 copy", "error", "instance sd", "rounds", "gap", "wall"]  # fmt: skip
    return markdown_table(columns, cells)


def _verdict(r: dict[str, Any]) -> str:
    fp32_gap = r["fp32_as_a_candidate_gap"]
    return (
        f"- **{r['example']}** ({r['trials']} trials: {r['statuses']}; LR rule {r['lr_rule']}; "
        f"judged on {r['judged_on']}; FP32 as a candidate: gap "
        f"{'-' if fp32_gap is None else round(fp32_gap, 2)}): {r['verdict']}."
    )
