"""The probes' cost model (``costmodel``): its predicted speedup against every dtype
combination measured side by side (the policies in ``costmodel_policies``)."""

from __future__ import annotations

import itertools
import json
import statistics
from typing import Any

from pages import Pages, markdown_table

from experiments.shared import (
    PROBE_TIME,
    WORK,
    beside_fp32,
    fp32_params,
    started_worker,
    vs_fp32,
)
from precsearch.cost_model import predicted
from precsearch.records import Measurement
from precsearch.stats import figures_text
from precsearch.study.probe import run_probes
from precsearch.study.space import SearchSpace, SpaceOptions

# Per example, the grouping whose dtype combinations at the user's own batch size and XLA
# setting are few enough to measure every one (at most 8) beside the probes' predictions.
COSTMODEL = {"wide_mlp": "type", "digits_cnn": "layer", "tiny_transformer": "type",
             "mobilenet_v2": "type"}  # fmt: skip


def costmodel(pages: Pages) -> None:
    """The probes' cost model against every dtype combination measured side by side."""
    rows, summary = [], []
    for name, group_by in COSTMODEL.items():
        with started_worker(name, WORK / "costmodel" / name) as worker:
            options = SpaceOptions(group_by=group_by, dtypes=["float32", "bfloat16"])
            space = SearchSpace(worker.model_info.to_dict(), options, ["layer_dtypes"])
            record = run_probes(worker, space, PROBE_TIME, block=10)
            points = [p for p in _dtype_points(space) if p != fp32_params(space)]
            measured = beside_fp32(worker, [space.policy(p) for p in points], 10, block=10)
        policies = [_policy_row(name, group_by, record, params, measured, f"c{i}")
                    for i, params in enumerate(points)]  # fmt: skip
        rows += policies
        summary.append(_summary_row(name, record, policies, measured))
        pages.write_csv("costmodel_policies", rows)
    pages.write("costmodel", summary, "The probes' cost model against measured policies",
                _page(summary, rows))  # fmt: skip
    pages.write_csv("costmodel_policies", rows)


def _dtype_points(space: SearchSpace) -> list[dict[str, Any]]:
    """Every combination of the space's dtype parameters (the rest at FP32's values)."""
    fp32 = fp32_params(space)
    groups = [p for p in space.choices() if p.startswith("dtype")]
    return [
        {**fp32, **dict(zip(groups, values, strict=True))}
        for values in itertools.product(*(space.choices()[g] for g in groups))
    ]


def _policy_row(
    name: str,
    group_by: str,
    record: dict[str, Any],
    params: dict[str, Any],
    measured: Measurement,
    label: str,
) -> dict[str, Any]:
    """One policy's predicted speedup against its measured one."""
    figures = vs_fp32(measured.rates, label)
    guess = predicted(record, params)
    low = [k.removeprefix("dtype:") or "every layer" for k, v in params.items()
           if k.startswith("dtype") and v == "bfloat16"]  # fmt: skip
    return {
        "example": name,
        "group_by": group_by,
        "bfloat16": ", ".join(low),
        "predicted": guess,
        "measured": figures_text(figures),
        "error": guess / figures["estimate"] - 1,
        "covered": figures["low"] <= guess <= figures["high"],
    }


def _summary_row(
    name: str, record: dict[str, Any], policies: list[dict[str, Any]], measured: Measurement
) -> dict[str, Any]:
    """An example's probes and how far their predictions were from the measured speeds."""
    errors = [abs(p["error"]) for p in policies]
    return {
        "example": name,
        "probes": len(record["probes"]),
        "probe_s": record["seconds"],
        "probe_rounds": record["rounds"],
        "policies": len(policies),
        "within_15": sum(e <= 0.15 for e in errors),
        "median_error": statistics.median(errors),
        "max_error": max(errors),
        "fp32_copy": figures_text(vs_fp32(measured.rates, "null")),
        "probe_record": json.dumps(record),
        "raw_rounds": json.dumps(measured.to_dict()),
    }


def _page(summary: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[str]:
    intro = (
        "Per example, the probes as `precsearch run` takes them before its search (each "
        "dtype group alone in bfloat16, and all of them, timed against FP32 in interleaved "
        f"rounds for at most {PROBE_TIME:.0f} s), then every combination of the groups in "
        "bfloat16 at the user's batch size and XLA setting measured side by side in one "
        "worker (10 rounds in random orders beside FP32 and a copy of it). Predicted = the "
        "product of the groups' probe ratios; error = predicted / measured - 1; 'in "
        "interval': the prediction inside the measured ratio's 95% interval.\n"
    )
    head = markdown_table(
        ["example", "probes", "probe time", "policies", "within ±15%", "median error",
         "largest error", "FP32 copy"],
        (
            [r["example"], r["probes"], f"{r['probe_s']:.0f} s ({r['probe_rounds']} rounds)",
             r["policies"], f"{r['within_15']} of {r['policies']}", f"{r['median_error']:.0%}",
             f"{r['max_error']:.0%}", r["fp32_copy"]]
            for r in summary
        ),
    )  # fmt: skip
    table = markdown_table(
        ["example", "in bfloat16", "predicted", "measured", "error", "in interval"],
        (
            [r["example"], r["bfloat16"], f"{r['predicted']:.2f}x", r["measured"],
             f"{r['error']:+.0%}", "yes" if r["covered"] else "no"]
            for r in rows
        ),
    )  # fmt: skip
    return [intro, *head, "\n## Every policy\n", *table]
