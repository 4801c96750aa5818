"""The cast-aware space against independent choices (``casts``): the same low-precision
choice for the layers that compute, with the layers between them following (no casts) or
kept float32 (a cast on each side), beside Keras's global recipe, in the same rounds."""

from __future__ import annotations

import json
from typing import Any

from pages import Pages, markdown_table

import precsearch
from experiments.shared import WORK, beside_fp32, started_worker, vs_fp32
from precsearch.stats import figures_text, ratio_figures
from precsearch.study.space import SearchSpace, SpaceOptions

CASTS = {"examples": ("digits_cnn", "mobilenet_v2", "tiny_transformer"), "rounds": 15}

INTRO = (
    "Per example, the layer-class (`--group-by type`) space two ways: `follow` (the "
    "default: only computing layers get a choice, shape and element-wise layers and "
    "normalisation take their input's dtype) and `independent` (every floating layer "
    "class a choice). Then one choice measured three ways in the same rounds (random "
    "order, blocks of at least 10 calls and 0.5 s, beside FP32 and a copy of it): the "
    "computing classes in bfloat16 with the others following; the same classes in "
    "bfloat16 with the others float32 (what the independent space gives that choice: "
    "a cast on each side of every layer between); and Keras's global `mixed_bfloat16`. "
    "Geometric mean of the per-round ratios (95% Student-t interval of their logs; one "
    "instance per policy, so no instance spread in it).\n"
)


def casts(pages: Pages) -> None:
    """Dimensions offered and speed of the follow rule against independent choices."""
    rows = []
    for name in CASTS["examples"]:
        rows.append(_example(name))
        pages.write_csv("casts", rows)
    table = markdown_table(
        ["example", "dtype choices (follow / independent)", "computing classes",
         "follow vs FP32", "independent vs FP32", "global vs FP32", "follow vs independent",
         "FP32 copy", "rounds"],
        (
            [r["example"], f"{r['dims_follow']} / {r['dims_independent']}", r["computing"],
             r["follow_vs_fp32"], r["independent_vs_fp32"], r["global_vs_fp32"],
             r["follow_vs_independent"], r["fp32_copy_vs_fp32"], r["rounds"]]
            for r in rows
        ),
    )  # fmt: skip
    pages.write("casts", rows, "The cast-aware space: follow against independent choices",
                [INTRO, *table])  # fmt: skip


def _example(name: str) -> dict[str, Any]:
    """One example's spaces both ways, and its one choice measured three ways."""
    with started_worker(name, WORK / "casts" / name) as worker:
        info = worker.model_info.to_dict()
        spaces = {
            casts: SearchSpace(
                info,
                SpaceOptions(group_by="type", casts=casts, dtypes=["float32", "bfloat16"]),
                ["layer_dtypes"],
            )  # fmt: skip
            for casts in ("follow", "independent")
        }
        follow, independent = spaces["follow"], spaces["independent"]
        computing = {p for p in follow.choices()}
        policies = {
            "follow": follow.policy({p: "bfloat16" for p in follow.choices()}),
            "independent": independent.policy(
                {p: "bfloat16" if p in computing else "float32" for p in independent.choices()}
            ),
            "global": precsearch.Policy(default="mixed_bfloat16"),
        }
        base = worker.model_info
        for policy in policies.values():
            policy.batch_size, policy.jit_compile = base.batch_size, base.jit_compile
        measured = beside_fp32(worker, list(policies.values()), CASTS["rounds"], block=10)
    figures = {label: vs_fp32(measured.rates, f"c{i}") for i, label in enumerate(policies)}
    return {
        "example": name,
        "dims_follow": len(follow.choices()),
        "dims_independent": len(independent.choices()),
        "computing": ", ".join(sorted(p.removeprefix("dtype:") for p in computing)),
        **{f"{label}_vs_fp32": figures_text(f) for label, f in figures.items()},
        "follow_vs_independent": figures_text(
            ratio_figures(measured.rates["c0"], measured.rates["c1"])
        ),
        "fp32_copy_vs_fp32": figures_text(vs_fp32(measured.rates, "null")),
        "rounds": len(measured.orders),
        "raw_rounds": json.dumps(measured.to_dict()),
    }
