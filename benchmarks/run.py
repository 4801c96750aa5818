"""Side-by-side benchmarks of precsearch on this machine: run by hand, never in CI.

    python benchmarks/run.py --help         # the experiments, and what `all` runs
    python benchmarks/run.py quality        # one experiment
    python benchmarks/run.py all            # the list's `all`, in order
    python benchmarks/run.py quality --results benchmarks/results/<machine>   # elsewhere

The experiments and ``all`` are listed once, in ``benchmarks/experiments/__init__.py``
(one module per experiment beside it); ``--help`` prints that list. Each writes
``<results>/<name>.md`` (and ``.csv``) with the machine and the date (``pages.py``).
Nothing else may run on the machine meanwhile: on 2 cores a second job skews every
figure (4x errors were seen that way). Study folders go to ``benchmarks/work/``
(ignored by git).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from experiments import NAMES, chosen, help_text
from pages import RESULTS, Pages


def parser() -> argparse.ArgumentParser:
    """The command line, its experiments listed from ``experiments.EXPERIMENTS``."""
    made = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=help_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    made.add_argument(
        "step",
        choices=[*NAMES, "all"],
        metavar="experiment",
        help="an experiment, or all (listed below)",
    )
    made.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="where the result files go (default benchmarks/results; another kind of machine "
        "gets a folder of its own; readme quotes the newest full run of all)",
    )
    return made


def main(argv: list[str] | None = None) -> None:
    """Run the chosen experiments one after another, each timed on stderr."""
    args = parser().parse_args(argv)
    folder = args.results.resolve()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    folder.mkdir(parents=True, exist_ok=True)
    for experiment in chosen(args.step):
        pages = Pages(folder, load_before=os.getloadavg())
        t0 = time.perf_counter()
        print(f"== {experiment.name}", file=sys.stderr, flush=True)
        experiment.function()(pages)
        print(
            f"== {experiment.name} done in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    main()
