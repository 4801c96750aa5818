"""Finding plugins by name through entry points, loading only the ones named."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any

from precsearch.errors import UserInputError
from precsearch.plugins._base import Dimension, Exporter, Loader, Objective

__all__ = ["GROUPS", "PluginEntry", "PluginError", "available", "create", "get", "split_spec"]

GROUPS = {
    "dimension": "precsearch.dimensions",
    "objective": "precsearch.objectives",
    "loader": "precsearch.loaders",
    "exporter": "precsearch.exporters",
}
BASES: dict[str, type] = {
    "dimension": Dimension,
    "objective": Objective,
    "loader": Loader,
    "exporter": Exporter,
}


class PluginError(UserInputError):
    """A plugin is unknown, defined twice, fails to import or breaks its interface."""


@dataclass(frozen=True)
class PluginEntry:
    """A plugin as its entry point declares it (nothing imported yet)."""

    kind: str
    name: str
    distribution: str
    value: str

    def load(self) -> type:
        """Import the plugin class and check it against its kind's base class."""
        try:
            obj = importlib.metadata.EntryPoint(self.name, self.value, GROUPS[self.kind]).load()
        except Exception as exc:
            raise PluginError(
                f"{self.kind} plugin {self.name!r} from distribution {self.distribution!r} "
                f"failed to import ({type(exc).__name__}: {exc})"
            ) from None
        base = BASES[self.kind]
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise PluginError(
                f"{self.kind} plugin {self.name!r} from {self.distribution!r} is {obj!r}, "
                f"expected a subclass of precsearch.plugins.{base.__name__}"
            )
        if getattr(obj, "name", None) != self.name:
            raise PluginError(
                f"{self.kind} plugin {self.name!r} from {self.distribution!r}: class "
                f"{obj.__qualname__} has name {getattr(obj, 'name', None)!r}, expected "
                f"{self.name!r}"
            )
        return obj


def _entries(kind: str) -> list[PluginEntry]:
    seen: dict[tuple[str, str, str], PluginEntry] = {}
    for point in importlib.metadata.entry_points(group=GROUPS[kind]):
        dist = point.dist.name if point.dist is not None else "?"
        seen.setdefault(
            (point.name, dist, point.value), PluginEntry(kind, point.name, dist, point.value)
        )
    return sorted(seen.values(), key=lambda e: (e.name, e.distribution))


def available(kind: str | None = None) -> list[PluginEntry]:
    """Every installed plugin (of one kind, or all), without importing any."""
    kinds = [kind] if kind else list(GROUPS)
    return [entry for k in kinds for entry in _entries(k)]


def get(kind: str, name: str) -> type:
    """The plugin class ``name`` of ``kind`` (imported now, and only it).

    Raises:
        PluginError: Unknown name (the message lists the available ones), a name two
            distributions define (naming both), or a plugin that fails to import.
    """
    if kind not in GROUPS:
        raise PluginError(f"unknown plugin kind {kind!r}; kinds: {', '.join(GROUPS)}")
    entries = _entries(kind)
    matches = [entry for entry in entries if entry.name == name]
    if not matches:
        names = ", ".join(sorted({entry.name for entry in entries})) or "none installed"
        raise PluginError(f"unknown {kind} {name!r}; available: {names}")
    if len(matches) > 1:
        who = " and ".join(f"{e.distribution} ({e.value})" for e in matches)
        raise PluginError(f"{kind} {name!r} is defined twice: by {who}; uninstall one")
    return matches[0].load()


def split_spec(spec: str) -> tuple[str, str | None]:
    """``"memory_cap=2048"`` → ``("memory_cap", "2048")``; ``"speedup"`` → ``("speedup", None)``."""
    name, sep, arg = spec.partition("=")
    return name.strip(), (arg.strip() if sep else None)


def create(kind: str, spec: str, *args: Any) -> Any:
    """An instance of the plugin named by ``spec`` (``NAME`` or ``NAME=ARG``).

    ``args`` come before the argument (a dimension takes the model info and options).
    """
    name, arg = split_spec(spec)
    return get(kind, name)(*args, arg=arg)
