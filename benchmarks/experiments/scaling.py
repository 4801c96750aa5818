"""Scaling (``scaling``): search cost and trials to the best against the number of dtype
choices, MobileNetV2 grouped by model, layer class, block or layer. Its machine is not
``machine.json``'s: that is the machine of the experiments the README quotes."""

from __future__ import annotations

from typing import Any

from pages import Pages, markdown_table

from experiments.shared import fresh_search

GROUPINGS = ("global", "type", "block", "layer")

INTRO = (
    "MobileNetV2 (alpha 0.35, 96 px, 155 layers, 8 classes) with one dtype choice per "
    "model (`global`), per layer class (`type`), per block (`block`) or per layer "
    "(`layer`). Same budget each: 5 trials of 20 steps, only the layer_dtypes dimension "
    "(batch size 32, XLA off), no confirmation, TPE. The first two trials are the "
    "enqueued baselines (FP32, global bfloat16).\n"
)


def scaling(pages: Pages) -> None:
    """A fresh MobileNetV2 search per grouping, with the same budget each."""
    rows = [_grouping(group_by) for group_by in GROUPINGS]
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
    pages.write(
        "scaling",
        rows,
        "Scaling: search cost vs the number of dtype choices (MobileNetV2)",
        [INTRO, *table, budget],
        machine=False,
    )


def _grouping(group_by: str) -> dict[str, Any]:
    """One grouping's search: its parameters, wall time and best feasible trial."""
    result, seconds = fresh_search(
        "scaling",
        "mobilenet_v2",
        study_name=f"mobilenet_{group_by}",
        group_by=group_by,
        trials=5,
        steps=20,
        dimensions=["layer_dtypes"],
        confirm_top=0,
    )
    frame = result.trials
    feasible = frame[frame["feasible"]]
    best = feasible["objective_speedup"].max() if not feasible.empty else float("nan")
    first_best = (
        int(feasible.loc[feasible["objective_speedup"].idxmax(), "number"]) + 1
        if not feasible.empty
        else None
    )
    return {
        "group_by": group_by,
        "parameters": len([c for c in frame.columns if c.startswith("param:dtype")]),
        "trials": len(frame),
        "wall_s": round(seconds),
        "best_speedup": best,
        "trials_to_best": first_best,
    }
