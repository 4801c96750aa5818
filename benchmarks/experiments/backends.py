"""The bundled studies on Keras's JAX backend beside TensorFlow (``backends``): the same
model file, options and machine, one whole ``precsearch run`` per backend in a fresh
process (a process has one backend), one backend after the other. Per study and backend:
the answer with its interval against that backend's own FP32, the global mixed recipe's
figure, the A/A error, the trials that ran and the wall time. Speedups compare within a
backend, never across: each is its own FP32's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

from pages import ROOT, Pages, markdown_table

from experiments.shared import WORK

STUDIES = ("wide_mlp", "digits_cnn")
BACKENDS = ("tensorflow", "jax")
ARGS = ["--trials", "6", "--sampler", "tpe", "--seed", "0", "--probe-time", "20",
        "--confirm-time", "20"]  # fmt: skip

INTRO = (
    "Two bundled studies run whole, once on TensorFlow and once on JAX "
    "(`KERAS_BACKEND`), with the same options (6 trials, TPE with seed 0, probes 20 s, "
    "confirmation 20 s, the study's own steps and dtypes), each in a fresh process and "
    "study folder, one at a time. 'speedup' is the answer's samples/s over FP32's on the "
    "same backend in the fresh rounds, with its 95% interval (blank where FP32 is the "
    "answer); 'global' the global mixed recipe's; 'A/A' the FP32 copy's reading against "
    "FP32 in those rounds; 'rows' the rows of trials.csv (the trials that ran and the "
    "proposals answered without training by the probes or the pins). The figures of one "
    "backend are not comparable with the other's FP32: each is a ratio to its own.\n"
)


def backends(pages: Pages) -> None:
    """Every bundled study on each backend, and its answer."""
    rows = [_study(study, backend) for study in STUDIES for backend in BACKENDS]
    columns = ["study", "backend", "answer", "speedup", "global", "aa", "rows", "seconds"]
    lines = [INTRO, *markdown_table(columns, [[r.get(c, "") for c in columns] for r in rows])]
    lines += ["", *(f"{r['study']} on {r['backend']}: {r['verdict']}\n" for r in rows)]
    title = "The bundled studies on TensorFlow and on JAX"
    # machine.json stays the page the README's Results quote.
    pages.write("backends", rows, title, lines, machine=False)


def _study(study: str, backend: str) -> dict[str, Any]:
    out = WORK / "backends" / backend
    shutil.rmtree(out / study, ignore_errors=True)
    env = {**os.environ, "KERAS_BACKEND": backend}
    model = ROOT / "studies" / study / "model.py"
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "precsearch", "run", str(model), "--out", str(out), *ARGS],
        env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    row: dict[str, Any] = {"study": study, "backend": backend, "seconds": round(seconds)}
    policy_file = out / study / "best_policy.json"
    if done.returncode != 0 or not policy_file.exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {**row, "answer": "failed", "verdict": last}
    manifest = json.loads(policy_file.read_text())["manifest"]
    confirmed = manifest.get("confirmed") or {}
    trials = _trials_that_ran(out / study / "trials.csv")
    return {
        **row,
        "answer": confirmed.get("answer", ""),
        "speedup": _figures(confirmed.get("speedup_vs_fp32")),
        "global": _figures(((confirmed.get("peers") or {}).get("global") or {}).get("vs_fp32")),
        "aa": _figures(confirmed.get("fp32_copy_vs_fp32")),
        "rows": trials,
        "verdict": manifest.get("verdict", ""),
    }


def _figures(figures: dict[str, Any] | None) -> str:
    if not figures:
        return ""
    return f"{figures['estimate']:.2f}x ({figures['low']:.2f}-{figures['high']:.2f})"


def _trials_that_ran(path: Any) -> int:
    import pandas as pd

    frame = pd.read_csv(path)
    return int((frame["state"] != "WAITING").sum())
