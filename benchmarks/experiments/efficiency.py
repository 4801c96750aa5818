"""Search efficiency: Optuna's samplers (TPE, NSGA-II, random) replayed for 10/20/30
trials against a space whose every policy was measured against FP32; the share of the
optimum they reach (``search_efficiency``, the whole table in ``search_efficiency_table``).
"""

from __future__ import annotations

import statistics
from typing import Any

import optuna
from pages import Pages, markdown_table

from experiments.shared import (
    DIGITS_CNN_BY_LAYER,
    WORK,
    MeasuredSpace,
    sampler,
    started_worker,
)
from precsearch.records import Budget
from precsearch.results.report import summarize_policy
from precsearch.stats import figures_text

SAMPLERS = ("tpe", "nsga2", "random")
TRIALS = (10, 20, 30)
SEEDS = 5


def search_efficiency(pages: Pages) -> None:
    """Every policy of the space measured, then each sampler replayed on the table."""
    how = DIGITS_CNN_BY_LAYER
    with started_worker(how.example, WORK / "efficiency", Budget(steps=20)) as worker:
        measured = how.measure(worker, how.space(worker), "efficiency")
    pages.write_csv(
        "search_efficiency_table",
        [
            {**measured.params(key), **{f"speedup_{k}": v for k, v in f.items()}}
            for key, f in measured.figures.items()
        ],
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for sampler_name in SAMPLERS:
        for trials in TRIALS:
            shares = [_replay(measured, sampler_name, trials, seed) for seed in range(SEEDS)]
            rows.append(
                {
                    "sampler": sampler_name,
                    "trials": trials,
                    "mean_share": statistics.mean(shares),
                    "min_share": min(shares),
                    "max_share": max(shares),
                }
            )
    pages.write(
        "search_efficiency",
        rows,
        "Search efficiency: samplers replayed against an exhaustive table",
        _page(measured, rows),
    )


def _replay(measured: MeasuredSpace, sampler_name: str, trials: int, seed: int) -> float:
    """The share of the optimum a sampler finds within ``trials`` trials."""
    choices = measured.space.choices()
    speed = measured.speed
    study = optuna.create_study(direction="maximize", sampler=sampler(sampler_name, seed))
    study.optimize(
        lambda t: speed[tuple(t.suggest_categorical(n, choices[n]) for n in measured.names)],
        n_trials=trials,
    )
    return study.best_value / measured.optimum


def _label(measured: MeasuredSpace, key: tuple) -> str:
    policy = measured.space.policy(measured.params(key))
    return (
        f"{summarize_policy(policy.to_dict())}, batch {policy.batch_size}, "
        f"XLA {'on' if policy.jit_compile else 'off'}"
    )


def _page(measured: MeasuredSpace, rows: list[dict[str, Any]]) -> list[str]:
    cfg = DIGITS_CNN_BY_LAYER
    ranked = measured.ranked()
    intro = (
        f"Space: {cfg.example}, `group_by={cfg.group_by}`, dimensions "
        f"{', '.join(measured.names)}: {len(measured.figures)} policies. Every point measured "
        f"against FP32 (the user's training) in chunks of {cfg.chunk} interleaved with FP32 in "
        f"one worker ({cfg.rounds} rounds of {cfg.block} steps each; {measured.seconds:.0f} s "
        "in all); a point's figure is its geometric-mean speedup over the rounds. Fidelity is "
        "not part of this replay (speed only). Share = the best speedup a sampler found "
        f"within N trials over the exhaustive optimum, over {SEEDS} seeds "
        "(TPE with 3 start-up trials, NSGA-II with population 4, Optuna's defaults otherwise).\n"
    )
    shares = markdown_table(
        ["sampler", "trials", "mean share", "min", "max"],
        (
            [r["sampler"], r["trials"], f"{r['mean_share']:.3f}", f"{r['min_share']:.3f}",
             f"{r['max_share']:.3f}"]
            for r in rows
        ),
    )  # fmt: skip
    best = markdown_table(
        ["rank", "policy", "speedup vs FP32: geometric mean (95% interval)"],
        (
            [i + 1, _label(measured, ranked[i][0]), figures_text(measured.figures[ranked[i][0]])]
            for i in [*range(5), len(ranked) - 1]
        ),
    )
    noise = measured.fp32
    spans = (
        f"\nThe whole table spans {ranked[-1][1]:.2f}x to {measured.optimum:.2f}x. The FP32 "
        "point itself (the same configuration as the reference it is timed against) measured "
        f"{figures_text(noise)}: "
        "that is the noise of one table entry, so a share within that of 1 means 'found a "
        "point measured as well as the best', not a proven optimum. Full table: "
        "`search_efficiency_table.csv`."
    )
    return [intro, *shares, "\n## The table\n", *best, spans]
