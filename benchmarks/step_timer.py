"""What the per-step timer costs: its steps against a plain loop of the same calls.

    python benchmarks/step_timer.py                     # writes results/step_timer.md
    python benchmarks/step_timer.py --results DIR       # elsewhere

The timer (:func:`precsearch.engine.instrument.step`) resets the metrics outside the
timed window and reads each step's loss back inside it. Two figures, on the shared test
model (``tests/models/mlp.py``): what falls outside the timed steps per step (the reset,
Python between steps; target under 5 ms), and the timed step's median over a plain
loop's mean call (target under 2x: the read-back, not a different step). The logic is
tested on a fake clock in ``tests/test_instrument.py``; these are this machine's costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from pages import RESULTS, ROOT, Pages, markdown_table

from precsearch import Policy
from precsearch.engine.instrument import step
from precsearch.engine.runner import Runner
from precsearch.model_file import load_model_file
from precsearch.records import Budget

ROUNDS, STEPS = 5, 30


def step_timer(pages: Pages) -> None:
    """The timer's steps against a plain loop, in rounds; the page ``step_timer``."""
    runner = Runner(load_model_file(ROOT / "tests" / "models" / "mlp.py"), budget=Budget())
    model = runner.problem.model_for(Policy(), seed=0)
    iterator = iter(runner.problem.dataset(32, seed=0))
    for _ in range(5):
        step(model, iterator)
    rows = []
    for i in range(ROUNDS):
        t0 = time.perf_counter()
        timed = [step(model, iterator)[0] for _ in range(STEPS)]
        wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(STEPS):
            logs = model.train_function(iterator)
        float(logs["loss"])
        loop = (time.perf_counter() - t0) / STEPS
        rows.append(
            {
                "round": i + 1,
                "outside_ms_per_step": 1000 * (wall - sum(timed)) / STEPS,
                "timed_median_ms": 1000 * statistics.median(timed),
                "plain_loop_ms": 1000 * loop,
                "ratio": statistics.median(timed) / loop,
            }
        )
    table = markdown_table(
        ["round", "outside the timer (ms/step)", "timed step median (ms)",
         "plain loop (ms/call)", "timed / plain"],
        (
            [r["round"], f"{r['outside_ms_per_step']:.2f}", f"{r['timed_median_ms']:.2f}",
             f"{r['plain_loop_ms']:.2f}", f"{r['ratio']:.2f}"]
            for r in rows
        ),
    )  # fmt: skip
    worst = max(r["outside_ms_per_step"] for r in rows)
    best_ratio = min(r["ratio"] for r in rows)
    verdict = (
        f"\nOutside the timer: at most {worst:.2f} ms per step (target < 5). Timed over plain: "
        f"{best_ratio:.2f} at best (target < 2).\n"
    )
    intro = (
        f"{ROUNDS} rounds of {STEPS} timed steps of the shared test model (batch 32, FP32), "
        "each against as many plain train-function calls.\n"
    )
    pages.write(
        "step_timer", rows, "Step timer: its cost beyond the step", [intro, *table, verdict],
        machine=False,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    pages = Pages(args.results.resolve())
    pages.folder.mkdir(parents=True, exist_ok=True)
    step_timer(pages)
    print(f"wrote {pages.folder / 'step_timer.md'}")


if __name__ == "__main__":
    main()
