"""The benchmark experiments, one module each, and the one list of them.

``EXPERIMENTS`` names each experiment, the function that runs it and what it measures, in
the order ``all`` runs them; ``ALL`` is what ``python benchmarks/run.py all`` runs. ``run.py``
builds its ``--help`` from this list, and ``tests/test_benchmarks.py`` checks that
benchmarks/README.md's table of experiments is :func:`readme_table`. Nothing here imports
precsearch or TensorFlow: an experiment's module is imported only when it runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pages import Pages


@dataclass(frozen=True)
class Experiment:
    """One experiment: its name on the command line, the function that runs it
    (``module:function``, given the results folder's :class:`~pages.Pages`), and what it
    measures, in one line."""

    name: str
    target: str
    does: str

    def function(self) -> Callable[[Pages], None]:
        """The function that runs the experiment (its module imported now)."""
        module, function = self.target.split(":")
        return getattr(importlib.import_module(module), function)


EXPERIMENTS = (
    Experiment("instrument", "experiments.instrument:instrument_noise",
               "The instrument's A/A noise by block length and estimator (instrument.md)."),
    Experiment("quality", "experiments.quality:policy_quality",
               "A search of each example and its confirmed answer vs FP32 (policy_quality.md)."),
    Experiment("selection", "experiments.selection:selection_rates",
               "The selection's false winners and power on replayed real rounds (selection.md)."),
    Experiment("repeatability", "experiments.repeatability:repeatability",
               "Quality's confirmations run twice in two processes (repeatability.md)."),
    Experiment("efficiency", "experiments.efficiency:search_efficiency",
               "Samplers replayed on an exhaustively measured space (search_efficiency.md)."),
    Experiment("overhead", "experiments.overhead:overhead",
               "Where a trial's wall time goes, over two fresh searches (overhead.md)."),
    Experiment("scaling", "experiments.scaling:scaling",
               "Search cost vs the number of dtype choices, MobileNetV2 (scaling.md)."),
    Experiment("casts", "experiments.casts:casts",
               "The cast-aware space: following layers vs independent choices (casts.md)."),
    Experiment("costmodel", "experiments.costmodel:costmodel",
               "The probes' cost model vs every dtype combination measured (costmodel.md)."),
    Experiment("warmstart", "experiments.warmstart:warmstart",
               "Search efficiency with and without the probes' warm start (warmstart.md)."),
    Experiment("wall", "experiments.wall:wall",
               "One whole `precsearch run` of the MobileNetV3Small study (wall.md)."),
    Experiment("pitfall", "experiments.pitfall:pitfall",
               "A study that pins a layer breaking in bfloat16 beside one without (pitfall.md)."),
    Experiment("fidelity", "experiments.fidelity:fidelity",
               "The quality test's false 'worse' and power, simulated and real (fidelity.md)."),
    Experiment("backends", "experiments.backends:backends",
               "The bundled studies on TensorFlow and on JAX, side by side (backends.md)."),
    Experiment("readme", "readme:readme_step",
               "README.md's Results, from the newest full run of all (--results)."),
)  # fmt: skip

# What `all` runs: repeatability reads the studies quality leaves; readme comes last.
ALL = ("instrument", "quality", "selection", "repeatability", "overhead", "readme")

NAMES = tuple(e.name for e in EXPERIMENTS)


def all_does() -> str:
    """What ``all`` runs, in words generated from :data:`ALL`."""
    left_out = [name for name in NAMES if name not in ALL]
    return (
        f"Runs {_listed(chosen_names('all'))}, in this order; not {_listed(left_out, 'or')} "
        "(run each alone)."
    )


def chosen_names(step: str) -> list[str]:
    """The experiments a command-line step runs: one, or ``all``'s in the list's order."""
    return [name for name in NAMES if name == step or (step == "all" and name in ALL)]


def chosen(step: str) -> list[Experiment]:
    """The experiments a command-line step runs (see :func:`chosen_names`)."""
    return [e for e in EXPERIMENTS if e.name in chosen_names(step)]


def help_text() -> str:
    """The experiments and ``all`` as ``run.py --help`` lists them."""
    width = max(len(name) for name in [*NAMES, "all"]) + 2
    lines = [f"  {e.name:<{width}}{e.does}" for e in EXPERIMENTS]
    return "\n".join(["experiments:", *lines, f"  {'all':<{width}}{all_does()}"])


def readme_table() -> list[str]:
    """The table of experiments in benchmarks/README.md, ``all`` last."""
    rows = [f"| `{e.name}` | {e.does} |" for e in EXPERIMENTS]
    return ["| experiment | what it measures |", "|---|---|", *rows, f"| `all` | {all_does()} |"]


def _listed(names: list[str], last: str = "and") -> str:
    return ", ".join(names[:-1]) + f" {last} {names[-1]}" if len(names) > 1 else "".join(names)
