"""Statistics of measured figures, shared by both sides of the process boundary.

The worker summarises step times with them, the study process decides and reports with
them. Nothing here imports TensorFlow or Optuna.
"""

from __future__ import annotations

__all__ = ["figures_text", "median", "spread"]


def median(values: list[float]) -> float:
    """The median of a non-empty list."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def spread(values: list[float]) -> dict[str, float]:
    """``{median, min, max, rounds}`` of a list of figures (say, per-round ratios)."""
    return {"median": median(values), "min": min(values), "max": max(values), "rounds": len(values)}


def figures_text(figures: dict[str, float] | None) -> str:
    """A spread as ``1.62x (1.40-1.80)`` (``-`` for none)."""
    if not figures:
        return "-"
    return f"{figures['median']:.2f}x ({figures['min']:.2f}-{figures['max']:.2f})"
