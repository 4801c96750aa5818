"""What every benchmark writes: its page (``<name>.md``), its rows (``<name>.csv``) and the
machine the figures come from (``machine.json``), into one results folder.

A page starts with its title and what was checked of the machine: the CPU model and its
low-precision flags, the load average as the step began and as it ended, the versions.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

import precsearch
from precsearch.hardware import describe

ROOT = Path(__file__).resolve().parents[1]
# The README's results; another kind of machine gets a folder of its own (``--results``).
RESULTS = ROOT / "benchmarks" / "results"


@dataclass(frozen=True)
class Previous:
    """A page's last run, kept beside the new one: before and after a change."""

    when: str
    rows: list[dict[str, Any]]


def replaced_line(
    previous: Previous | None, row_text: Callable[[dict[str, Any]], str]
) -> list[str]:
    """The previous run's rows in one line (each through ``row_text``), said to be
    replaced by this page's figures; nothing without a previous run."""
    if not previous or not previous.rows:
        return []
    runs = "; ".join(row_text(row) for row in previous.rows)
    return [f"\nThe previous run ({previous.when}): {runs}. This page's figures replace it."]


@dataclass(frozen=True)
class Pages:
    """The results folder a step writes to, and the load average (1, 5 and 15 minutes) as
    the step began (``None``: not known, the header says only the load as it ended)."""

    folder: Path = RESULTS
    load_before: tuple[float, float, float] | None = None

    def write_csv(self, name: str, rows: list[dict[str, Any]]) -> None:
        """A benchmark's rows as ``<name>.csv``."""
        pd.DataFrame(rows).to_csv(self.folder / f"{name}.csv", index=False)

    def write(
        self,
        name: str,
        rows: list[dict[str, Any]],
        title: str,
        lines: list[str],
        machine: bool = True,
    ) -> None:
        """A benchmark's rows as ``<name>.csv`` and its page as ``<name>.md``.

        The page is the title and the machine, then ``lines``; with ``machine``, the
        machine also goes to ``machine.json``, which the README's Results quote.
        """
        self.write_csv(name, rows)
        (self.folder / f"{name}.md").write_text("\n".join([self.header(title), *lines]) + "\n")
        if machine:
            self.write_machine()

    def header(self, title: str) -> str:
        """A page's title and what was checked of the machine it ran on."""
        hw = describe()
        versions = json.dumps(versions_used())
        load = f"{_load(self.load_before)} as the step began, " if self.load_before else ""
        return (
            f"# {title}\n\n"
            f"Measured {datetime.date.today().isoformat()} on {hw['cpu']} ({hw['cpu_count']} "
            f"cores; low-precision flags: {', '.join(hw['cpu_low_precision_flags']) or 'none'}; "
            f"model and flags from /proc/cpuinfo). Load average (1, 5, 15 min): {load}"
            f"{_load(os.getloadavg())} as it ended. Versions: {versions}. Produced by "
            "`python benchmarks/run.py`.\n\n"
        )

    def write_machine(self) -> None:
        """The machine the results come from, for the README's Results section."""
        machine = {
            **describe(),
            "date": datetime.date.today().isoformat(),
            "versions": versions_used(),
        }
        (self.folder / "machine.json").write_text(json.dumps(machine, indent=2) + "\n")

    def previous(self, name: str) -> Previous | None:
        """The rows of ``<name>.csv`` and the date its page was measured, before this run
        replaces them (``None``: no earlier run here)."""
        if not (self.folder / f"{name}.csv").exists():
            return None
        text = (self.folder / f"{name}.md").read_text().splitlines()
        measured = next((x for x in text if x.startswith("Measured ")), "Measured earlier (")
        when = measured.removeprefix("Measured ").split(" (")[0]
        return Previous(when, pd.read_csv(self.folder / f"{name}.csv").to_dict("records"))


def markdown_table(columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    """A markdown table's lines: the column names, the rule, a line per row."""
    names = list(columns)
    return [_cells(names), "|---" * len(names) + "|", *(_cells(row) for row in rows)]


def versions_used() -> dict[str, str]:
    """The versions of precsearch, Keras and Optuna that produced the figures."""
    import keras
    import optuna

    return {
        "precsearch": precsearch.__version__,
        "keras": keras.__version__,
        "optuna": optuna.__version__,
    }


def _cells(values: Iterable[Any]) -> str:
    return "| " + " | ".join(str(v) for v in values) + " |"


def _load(averages: tuple[float, float, float]) -> str:
    return ", ".join(f"{a:.2f}" for a in averages)
