"""A whole study's wall time (``wall``): the issue's MobileNetV3Small-class study with its
own ``precsearch_config`` (16 trials, 120 steps at batch 32) and every default of
`precsearch run`, confirmation included: where the time went, the answer, and the last
run's figures beside."""

from __future__ import annotations

from typing import Any

from pages import Pages, Previous, markdown_table

from experiments.shared import StudyTime, answer_fields, fresh_search, study_time
from precsearch.cost_model import probe_lines
from precsearch.results.report import OUTSIDE, outside_trials, time_summary
from precsearch.stored import confirmation_of, is_repeat

WALL = "mobilenet_v3_small"

INTRO = (
    f"`precsearch run studies/{WALL}/model.py` with every default (16 trials of 120 "
    "steps at batch 32, the probes, the confirmation), from a fresh study folder, in "
    "one process; wall time from start to the exported answer. 'rest' is what is "
    "neither the probes nor a trial: the confirmation, the export and the study's own "
    "start.\n"
)


def wall(pages: Pages) -> None:
    """One whole study from start to end, as `precsearch run` does it: its wall time,
    where it went, and the answer."""
    previous = pages.previous("wall")
    result, seconds = fresh_search("wall", WALL)
    study = result.study
    spent = study_time(study)
    record = confirmation_of(study)
    rest = record.seconds if record else {}
    row = {
        "example": WALL,
        "wall_s": seconds,
        "probe_s": spent.probe_s,
        "trials_s": spent.trials_s,
        "rest_s": seconds - spent.probe_s - spent.trials_s,
        **{f"{phase}_s": rest.get(phase) for phase, _ in OUTSIDE},
        "answered_by_probes": spent.answered_by_probes,
        "repeats": sum(is_repeat(t) for t in study.trials),
        **spent.phases,
        "overhead_share": spent.overhead_share,
        **answer_fields(result),
    }
    lines = [
        INTRO,
        *_table(row, spent),
        "",
        f"Trials: {row['statuses']}. " + time_summary(spent.results, spent.trials_s),
        "",
        outside_trials(study),
        "",
        f"Probes ({spent.probes.get('rounds')} rounds): "
        + "; ".join(probe_lines(spent.probes))
        + ".",
        "",
        f"Verdict: {row['verdict']}.",
        *_before(previous),
    ]
    pages.write("wall", [row], "A whole study's wall time: MobileNetV3Small", lines)


def _table(row: dict[str, Any], spent: StudyTime) -> list[str]:
    best = "FP32" if row["best_is_fp32"] else row["best_policy"]
    seconds = row["wall_s"]
    return markdown_table(
        ["wall", "probes", "trials", "rest", "trials run", "answered by the probes",
         "repeats", "overhead in trials", "answer", "batch", "XLA", "vs FP32", "FP32 copy"],
        [[f"{seconds:.0f} s ({seconds / 60:.1f} min)", f"{spent.probe_s:.0f} s",
          f"{spent.trials_s:.0f} s", f"{row['rest_s']:.0f} s", len(spent.results),
          row["answered_by_probes"], row["repeats"], f"{spent.overhead_share:.0%}", best,
          row["batch_size"], "on" if row["jit"] else "off", row["vs_fp32"],
          row["fp32_copy_vs_fp32"]]],
    )  # fmt: skip


def _before(previous: Previous | None) -> list[str]:
    """The previous run's figures in a line, or nothing."""
    if previous is None:
        return []
    (last,) = previous.rows
    return [
        f"\nThe previous run ({previous.when}): {last['wall_s']:.0f} s "
        f"({last['wall_s'] / 60:.1f} min): probes {last['probe_s']:.0f} s, trials "
        f"{last['trials_s']:.0f} s, rest {last['rest_s']:.0f} s; overhead in trials "
        f"{last['overhead_share']:.0%}; answer {last['vs_fp32']}."
    ]
