"""JSON helpers of the records: no NaN in JSON, and tolerance of unknown keys."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, TypeVar

__all__ = ["json_safe", "known_fields"]

_R = TypeVar("_R")


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as ``None`` (JSON has no NaN) and tuples as lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def known_fields(cls: type[_R], data: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that are fields of ``cls`` (newer records may have more)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return {k: v for k, v in data.items() if k in names}
