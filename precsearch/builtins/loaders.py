"""The ``model_file`` loader: the model file contract of :mod:`precsearch.model_file`."""

from __future__ import annotations

from typing import Any

from precsearch.model_file import load_model_file, read_config
from precsearch.plugins import Loader
from precsearch.records import ModelSpec

__all__ = ["ModelFileLoader"]


class ModelFileLoader(Loader):
    """The model file contract: ``build_model()``, ``train_data()``, optional extras."""

    name = "model_file"

    def load(self, source: Any) -> ModelSpec:
        return load_model_file(source)

    def config(self, source: Any) -> dict[str, Any]:
        return read_config(source)
