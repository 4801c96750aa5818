"""A pitfall's cost (``pitfall``): a whole study of a text Transformer whose embedding
breaks in bfloat16 (token ids up to 1999 through a float Input; bfloat16 rounds 1999 to
2000), which precsearch localizes and pins float32, beside the same study of the same
model with int32 ids, which has nothing to localize. Per study: its wall time, the seconds
the localizing took, the pins and what they say, the trials that ran and those the pins
answered, the failed ones and the verdict. The last run's figures stay beside."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from pages import ROOT, Pages, markdown_table, replaced_line

import precsearch
from experiments.shared import WORK, answer_fields, study_time
from precsearch.pins import pin_lines
from precsearch.stored import (
    answered_by_pins,
    is_repeat,
    result_of,
    status_of,
    study_record,
    trained_own_policy,
)
from precsearch.study import pitfalls

MODELS = ROOT / "tests" / "models"

# The two model files, and what their Input carries.
PITFALL = {
    "text_transformer": "float ids (the pitfall)",
    "text_transformer_int32": "int32 ids (none)",
}

# The same options for both studies; trials run in a worker process.
OPTIONS: dict[str, Any] = {
    "steps": 30,
    "trials": 8,
    "dtypes": "float32,bfloat16",
    "sampler": "tpe",
    "seed": 0,
    "probe_time": 30.0,
    "confirm_time": 30.0,
    "exporters": ["policy_json"],
}

INTRO = (
    "Two whole studies with the same options (8 trials of 30 steps, dtypes float32 and "
    "bfloat16, TPE with seed 0, probes 30 s, confirmation 30 s, only the policy file "
    "exported), each from a fresh study folder with its trials in a worker process: "
    "`tests/models/text_transformer.py` (the Keras example's shape, token ids up to 1999 "
    "through a float Input: bfloat16 rounds 1999 to 2000, out of the embedding's range) "
    "and `tests/models/text_transformer_int32.py` (the same model and data, the ids "
    "through an int32 Input: no pitfall). 'localizing' is the time in "
    "`precsearch.study.pitfalls.localize` (its one-batch checks in the worker, timed in "
    "the study process; not in the probes' or the trials' seconds), with its calls; 'rest' "
    "is the wall time outside the probes, the trials and the localizing (the confirmation, "
    "the export, the study's start). 'answered by the pins': proposals that put a pinned "
    "group in its dtype, answered infeasible without training; 'broke': trials that ran, "
    "broke in low precision and were localized.\n"
)


@contextmanager
def timed_localize() -> Iterator[list[float]]:
    """Every call of :func:`precsearch.study.pitfalls.localize` in this process timed
    meanwhile (its seconds appended to the list yielded); the function restored after."""
    seconds: list[float] = []
    original = pitfalls.localize

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - t0)

    with mock.patch.object(pitfalls, "localize", timed):
        yield seconds


def pitfall(pages: Pages) -> None:
    """A study of each model file, with and without the pitfall, and what localizing it
    cost."""
    previous = pages.previous("pitfall")
    rows = [_study(name, carries) for name, carries in PITFALL.items()]
    lines = [INTRO, *_table(rows), ""]
    for row in rows:
        pins = row["pin_lines"] or "none"
        lines += [f"{row['model']}: pins: {pins}. Verdict: {row['verdict']}.", ""]
    lines += [_difference(*rows), *replaced_line(previous, _row)]
    pages.write("pitfall", rows, "A pitfall's cost: localizing a layer that breaks", lines)


def _study(name: str, carries: str) -> dict[str, Any]:
    """One whole study of a model file, fresh, and its row."""
    shutil.rmtree(WORK / "pitfall" / name, ignore_errors=True)
    with timed_localize() as calls:
        t0 = time.perf_counter()
        result = precsearch.search(
            str(MODELS / f"{name}.py"),
            out=str(WORK / "pitfall"),
            study_name=name,
            progress=sys.stderr,
            **OPTIONS,
        )
        seconds = time.perf_counter() - t0
    study = result.study
    spent = study_time(study)
    pins = study_record(study, "pins") or {}
    info = study_record(study, "model_info")
    results = [result_of(t) for t in study.trials if trained_own_policy(t)]
    answer = answer_fields(result) if result.confirmation else {"verdict": "not confirmed"}
    return {
        "model": name,
        "input": carries,
        "wall_s": seconds,
        "probe_s": spent.probe_s,
        "trials_s": spent.trials_s,
        "localize_s": sum(calls),
        "localize_calls": len(calls),
        "rest_s": seconds - spent.probe_s - spent.trials_s - sum(calls),
        "pins": len(pins),
        "pin_lines": "; ".join(pin_lines(pins, info.integer_inputs if info else {})),
        "study_trials": len(study.trials),
        "trials_ran": len(results),
        "answered_by_pins": sum(answered_by_pins(t) for t in study.trials),
        "answered_by_probes": spent.answered_by_probes,
        "repeats": sum(is_repeat(t) for t in study.trials),
        "broke": sum(bool(r.numerics.get("broke")) for r in results),
        "failed": sum(status_of(t) in ("failed", "fail") for t in study.trials),
        **answer,
    }


def _table(rows: list[dict[str, Any]]) -> list[str]:
    return markdown_table(
        ["model", "ids", "wall", "probes", "trials", "localizing", "rest", "trials run",
         "broke", "answered by the pins", "answered by the probes", "repeats", "failed",
         "pins", "answer", "vs FP32"],
        (
            [r["model"], r["input"], f"{r['wall_s']:.0f} s", f"{r['probe_s']:.0f} s",
             f"{r['trials_s']:.0f} s", f"{r['localize_s']:.1f} s ({r['localize_calls']} calls)",
             f"{r['rest_s']:.0f} s", r["trials_ran"], r["broke"], r["answered_by_pins"],
             r["answered_by_probes"], r["repeats"], r["failed"], r["pins"],
             "FP32" if r.get("best_is_fp32") else r.get("best_policy", "-"),
             r.get("vs_fp32", "-")]
            for r in rows
        ),
    )  # fmt: skip


def _difference(with_it: dict[str, Any], without: dict[str, Any]) -> str:
    """The pitfall's study beside the other one, in a line."""
    extra = with_it["wall_s"] - without["wall_s"]
    return (
        f"With the pitfall the study took {with_it['wall_s']:.0f} s against "
        f"{without['wall_s']:.0f} s without it ({extra:+.0f} s, "
        f"{extra / without['wall_s']:+.0%}; the two searches propose different policies, "
        f"so not all of it is the localizing), {with_it['localize_s']:.1f} s of it "
        f"localizing ({with_it['localize_s'] / with_it['wall_s']:.0%} of its wall time). "
        f"With it {with_it['trials_ran']} trials ran ({with_it['broke']} of them broke), "
        f"{with_it['answered_by_pins']} proposals were answered by the pins; without it "
        f"{without['trials_ran']} trials ran."
    )


def _row(r: dict[str, Any]) -> str:
    """One row of the previous run, in words."""
    return (
        f"{r['model']} {r['wall_s']:.0f} s, localizing {r['localize_s']:.1f} s, "
        f"{r['pins']} pins, {r['trials_ran']} trials run, {r['answered_by_pins']} answered "
        "by the pins"
    )
