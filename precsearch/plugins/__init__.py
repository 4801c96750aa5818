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
named. The records a plugin reads or returns (:class:`~precsearch.records.TrialResult`,
:class:`~precsearch.records.ModelSpec`, ...) are in :mod:`precsearch.records`.
"""

from __future__ import annotations

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

__all__ = [
    "GROUPS",
    "Dimension",
    "Exporter",
    "Loader",
    "Objective",
    "PluginEntry",
    "PluginError",
    "Winner",
    "available",
    "create",
    "get",
    "split_spec",
]
