"""Contract test suites for plugin authors (like ``optuna.testing``).

Subclass one in your tests, name the subclass ``Test...`` so that pytest collects it,
and set ``plugin_class`` (and ``arg`` if your plugin takes one)::

    from precsearch.testing import DimensionContract
    from my_package import MyDimension

    class TestMyDimension(DimensionContract):
        plugin_class = MyDimension

Override the ``make_*`` methods where the defaults do not fit your plugin. The built-in
plugins are tested with these same suites.
"""

from __future__ import annotations

from precsearch.testing._contracts import (
    DimensionContract,
    ExporterContract,
    LoaderContract,
    ObjectiveContract,
    sample_model_info,
    sample_result,
)

__all__ = [
    "DimensionContract",
    "ExporterContract",
    "LoaderContract",
    "ObjectiveContract",
    "sample_model_info",
    "sample_result",
]
