"""The four plugin kinds: small abstract base classes, one to three abstract methods each.

Every plugin class has a ``name`` (what users type) and is found through an entry point
group (see :mod:`precsearch.plugins`); the built-ins register the same way. A plugin
may take one optional string argument, given on the command line as ``NAME=ARG``.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, ClassVar

from precsearch.records import ModelSpec, SpaceOptions, TrialResult, Winner

__all__ = ["Dimension", "Exporter", "Loader", "Objective", "Winner"]


class Dimension(abc.ABC):
    """One axis of the search: categorical Optuna parameters and the policy fields they set.

    Args:
        info: The model info (``model_info.json``: layers, batch size, hardware).
        options: The space options (``group_by``, ``dtypes``, ``lr_rule``, ...).
        arg: The optional ``NAME=ARG`` argument.
    """

    name: ClassVar[str]
    #: Whether the parameters only choose how precisely to compute (dtypes, loss
    #: scaling): a trial's FP32 twin sets them to :meth:`baseline` ``("float32")``.
    precision: ClassVar[bool] = False

    def __init__(self, info: dict[str, Any], options: SpaceOptions, arg: str | None = None) -> None:
        self.info = info
        self.options = options
        self.arg = arg

    @abc.abstractmethod
    def choices(self) -> dict[str, list[Any]]:
        """Parameter name to its choices (JSON scalars), the neutral (baseline) one first."""

    @abc.abstractmethod
    def write(self, params: dict[str, Any], draft: dict[str, Any]) -> None:
        """Set this dimension's fields of a policy draft (``Policy`` keyword arguments:
        ``default``, ``types``, ``layers``, ``loss_scale``, ``batch_size``, ...)."""

    def baseline(self, dtype: str) -> dict[str, Any]:
        """Parameters of the baseline computing everything in ``dtype`` (a short name).

        The default takes each parameter's first (neutral) choice.
        """
        return {name: values[0] for name, values in self.choices().items()}


class Objective(abc.ABC):
    """A score of a trial, optimised by the study beside speedup and fidelity.

    ``direction`` is ``"minimize"`` or ``"maximize"``; ``None`` makes a constraint-only
    plugin (its :meth:`constraint` is used, its value is not optimised).

    Args:
        arg: The optional ``NAME=ARG`` argument.
    """

    name: ClassVar[str]
    direction: ClassVar[str | None] = "minimize"

    def __init__(self, arg: str | None = None) -> None:
        self.arg = arg

    @abc.abstractmethod
    def value(self, result: TrialResult, reference: TrialResult | None) -> float:
        """The score of a trial that ran (``ok`` or ``infeasible``).

        Args:
            result: The trial's measurements.
            reference: The study's FP32 baseline trial, when it has run.
        """

    def constraint(self, result: TrialResult, reference: TrialResult | None) -> float | None:
        """Optional feasibility constraint: ≤ 0 feasible, ``None`` for none (default)."""
        return None


class Loader(abc.ABC):
    """Turns what a user points at (a path, or an object in a notebook) into a ModelSpec.

    A loader used by a worker process receives the same string source there.

    Args:
        arg: The optional ``NAME=ARG`` argument.
    """

    name: ClassVar[str]

    def __init__(self, arg: str | None = None) -> None:
        self.arg = arg

    @abc.abstractmethod
    def load(self, source: Any) -> ModelSpec:
        """The spec for ``source``; a broken source raises ``UserInputError``."""

    def config(self, source: Any) -> dict[str, Any]:
        """Defaults read without building anything (``precsearch_config``); none here."""
        return {}


class Exporter(abc.ABC):
    """Writes the winner of a study into a folder.

    Exporters with ``needs_model = True`` run in the worker process that has TensorFlow,
    and get the trained model; the others run in the parent and get the study.

    Args:
        arg: The optional ``NAME=ARG`` argument.
    """

    name: ClassVar[str]
    needs_model: ClassVar[bool] = False

    def __init__(self, arg: str | None = None) -> None:
        self.arg = arg

    @abc.abstractmethod
    def export(self, winner: Winner, directory: Path) -> list[Path]:
        """Write into ``directory`` (which exists); return the paths written."""
