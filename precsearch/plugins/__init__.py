"""Plugins: four kinds, found by name through entry points.

======================  ===========================  ==================================
kind                    entry-point group            built-ins
======================  ===========================  ==================================
:class:`Dimension`      ``precsearch.dimensions``    layer_dtypes, loss_scale,
                                                     batch_size, jit_compile
:class:`Objective`      ``precsearch.objectives``    speedup, fidelity
:class:`Loader`         ``precsearch.loaders``       model_file
:class:`Exporter`       ``precsearch.exporters``     policy_json, saved_model, trials_csv
======================  ===========================  ==================================

The built-ins (:mod:`precsearch.builtins`) register through precsearch's own
``pyproject.toml`` exactly as a third-party package does. A plugin is imported only when
named. This package is all a plugin needs to import: the four kinds, the records a
plugin reads or returns (:class:`TrialResult`, :class:`ModelSpec`, :class:`SpaceOptions`,
:class:`Winner` and its :class:`Policy`, ``SHORT_DTYPES``), :class:`UserInputError` for
bad input, and the model file contract's readers for a loader that builds on it
(:func:`import_model_file`, :func:`functions_of`, :func:`read_config`,
:func:`read_literal`).
"""

from __future__ import annotations

from precsearch.errors import UserInputError
from precsearch.model_file import functions_of, import_model_file, read_config, read_literal
from precsearch.plugins._base import Dimension, Exporter, Loader, Objective, Winner
from precsearch.plugins._registry import (
    GROUPS,
    PluginEntry,
    PluginError,
    available,
    create,
    get,
    split_spec,
)
from precsearch.policy import Policy
from precsearch.records import SHORT_DTYPES, ModelSpec, SpaceOptions, TrialResult

__all__ = [
    "GROUPS",
    "SHORT_DTYPES",
    "Dimension",
    "Exporter",
    "Loader",
    "ModelSpec",
    "Objective",
    "PluginEntry",
    "PluginError",
    "Policy",
    "SpaceOptions",
    "TrialResult",
    "UserInputError",
    "Winner",
    "available",
    "create",
    "functions_of",
    "get",
    "import_model_file",
    "read_config",
    "read_literal",
    "split_spec",
]
