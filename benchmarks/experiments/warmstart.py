"""Search efficiency with and without the probes (``warmstart``): the probes measured for
real, every policy of a small space measured against FP32, then searches replayed on that
table as `precsearch run` runs them, with the probes' warm start and without."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import optuna
from pages import Pages, markdown_table

from experiments.shared import (
    DIGITS_CNN_BY_LAYER,
    PROBE_TIME,
    WORK,
    MeasuredSpace,
    sampler,
    started_worker,
)
from precsearch.cost_model import XLA, predicted, predicted_best, rejection, ruled_out
from precsearch.results.report import summarize_policy
from precsearch.study.probe import run_probes

SAMPLERS = ("tpe", "random")
TRIALS = (4, 8, 12, 20)
SEEDS = 5


@dataclass(frozen=True)
class Table:
    """The exhaustive table and the probes' record the replays read."""

    measured: MeasuredSpace
    probes: dict[str, Any]

    def allowed(self) -> int:
        """How many policies the probes leave to measure."""
        keys = self.measured.figures
        return sum(not rejection(self.probes, self.measured.params(key)) for key in keys)


def warmstart(pages: Pages) -> None:
    """Search efficiency with and without the probes, replayed on an exhaustive table."""
    how = DIGITS_CNN_BY_LAYER
    with started_worker(how.example, WORK / "warmstart") as worker:
        space = how.space(worker)
        probes = run_probes(worker, space, PROBE_TIME, block=10)
        table = Table(how.measure(worker, space, "warmstart"), probes)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for sampler_name in SAMPLERS:
        for with_probes in (False, True):
            for trials in TRIALS:
                runs = [_replay(table, sampler_name, trials, seed, with_probes)
                        for seed in range(SEEDS)]  # fmt: skip
                shares = [share for share, _ in runs]
                rows.append(
                    {
                        "sampler": sampler_name,
                        "probes": with_probes,
                        "trials": trials,
                        "mean_share": statistics.mean(shares),
                        "min_share": min(shares),
                        "answered_by_probes": statistics.mean(n for _, n in runs),
                    }
                )
    pages.write("warmstart", rows, "Search efficiency with the probes' warm start",
                _page(table, rows))  # fmt: skip


def _replay(
    table: Table, sampler_name: str, trials: int, seed: int, with_probes: bool
) -> tuple[float, int]:
    """The share of the optimum found within ``trials`` counted trials, as a study runs
    them (FP32 and the global recipe first; with the probes, the predicted best next and
    ruled-out policies answered from the probes, not counted), and how many the probes
    answered."""
    measured, record = table.measured, table.probes
    space, speed = measured.space, measured.speed
    distributions = {
        n: optuna.distributions.CategoricalDistribution(values)
        for n, values in space.choices().items()
    }
    study = optuna.create_study(direction="maximize", sampler=sampler(sampler_name, seed))
    for _, params in space.baselines():
        study.enqueue_trial(params)
    best = predicted_best(record, space) if with_probes else None
    if best is not None:
        study.enqueue_trial(best)
    # Every policy the probes allow: once all are measured, the replay is done.
    to_measure = table.allowed() if with_probes else len(measured.figures)
    counted, asked, answered, found = 0, 0, 0, 0.0
    seen: set[tuple] = set()
    while counted < trials and asked < 500:
        asked += 1
        trial = study.ask(distributions)
        key = measured.key(trial.params)
        if with_probes and rejection(record, trial.params):
            study.tell(trial, predicted(record, trial.params))
            answered += 1
            continue
        study.tell(trial, speed[key])
        if key in seen:  # a sampler's repeat: its figure stands, not a trial
            continue
        seen.add(key)
        counted += 1
        found = max(found, speed[key])
        if len(seen) == to_measure:
            break
    return found / measured.optimum, answered


def _ruled_text(record: dict[str, Any]) -> str:
    gone = ruled_out(record)
    return (
        ", ".join("XLA" if p == XLA else f"bfloat16 for {p.removeprefix('dtype:')}" for p in gone)
        or "nothing"
    )


def _page(table: Table, rows: list[dict[str, Any]]) -> list[str]:
    cfg, measured, record = DIGITS_CNN_BY_LAYER, table.measured, table.probes
    best = measured.params(measured.ranked()[0][0])
    fp32 = measured.fp32["estimate"]
    intro = (
        f"Space: {cfg.example}, `group_by={cfg.group_by}` in the cast-aware space, "
        f"dimensions {', '.join(measured.names)}: {len(measured.figures)} policies, every one "
        f"measured against FP32 (chunks of {cfg.chunk}, {cfg.rounds} rounds of at least "
        f"{cfg.block} calls and 0.5 s; {measured.seconds:.0f} s). The probes were measured for "
        f"real first ({len(record['probes'])} probes, {record['rounds']} rounds, "
        f"{record['seconds']:.0f} s); they ruled out {_ruled_text(record)}. Each study is "
        "replayed as `precsearch run` runs one: FP32 and the global recipe first, then the "
        "sampler; with the probes the predicted-best policy comes third and a policy they rule "
        "out is answered from them (not counted as a trial), and so is a sampler's repeat of a "
        "policy it measured. Share = the best speedup found within N counted trials "
        f"over the table's best ({measured.optimum:.2f}x; FP32 itself measured "
        f"{fp32:.2f}x, the noise of one entry; the best is "
        f"{summarize_policy(measured.space.policy(best).to_dict())}"
        f" at batch {best['batch_size']}), over {SEEDS} seeds.\n"
    )
    lines = markdown_table(
        ["sampler", "probes", "trials", "mean share", "worst seed",
         "proposals answered by the probes"],
        (
            [r["sampler"], "yes" if r["probes"] else "no", r["trials"], f"{r['mean_share']:.3f}",
             f"{r['min_share']:.3f}", f"{r['answered_by_probes']:.1f}"]
            for r in rows
        ),
    )  # fmt: skip
    return [intro, *lines]
