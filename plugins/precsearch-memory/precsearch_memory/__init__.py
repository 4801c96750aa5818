"""Memory objectives for precsearch: minimise the peak, or cap it."""

from __future__ import annotations

import re

from precsearch.plugins import Objective, TrialResult, UserInputError

__all__ = ["MemoryCap", "PeakMemory", "parse_mib"]

UNITS = {"": 1.0, "mb": 1.0, "mib": 1.0, "gb": 1024.0, "gib": 1024.0}


def parse_mib(text: str) -> float:
    """``"2048"``, ``"2048MB"``, ``"12GB"`` → MiB."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text or "")
    if not match or match.group(2).lower() not in UNITS or float(match.group(1)) <= 0:
        raise UserInputError(
            f"memory cap {text!r}: expected a positive size in MiB, or with MB/MiB/GB/GiB"
        )
    return float(match.group(1)) * UNITS[match.group(2).lower()]


def _over(result: TrialResult, cap: float) -> float | None:
    if result.peak_memory_mb is None:
        return None
    return result.peak_memory_mb - cap


class PeakMemory(Objective):
    """Peak memory of a trial in MiB, minimised; ``peak_memory=CAP`` also caps it."""

    name = "peak_memory"
    direction = "minimize"

    def __init__(self, arg: str | None = None) -> None:
        super().__init__(arg)
        self.cap = parse_mib(arg) if arg else None

    def value(self, result: TrialResult, reference: TrialResult | None) -> float | None:
        return result.peak_memory_mb

    def constraint(self, result: TrialResult, reference: TrialResult | None) -> float | None:
        return None if self.cap is None else _over(result, self.cap)


class MemoryCap(Objective):
    """A constraint only: a trial is feasible when its peak memory is at most the cap."""

    name = "memory_cap"
    direction = None

    def __init__(self, arg: str | None = None) -> None:
        super().__init__(arg)
        if not arg:
            raise UserInputError("memory_cap needs a size: --objective memory_cap=12GB")
        self.cap = parse_mib(arg)

    def value(self, result: TrialResult, reference: TrialResult | None) -> float | None:
        return result.peak_memory_mb

    def constraint(self, result: TrialResult, reference: TrialResult | None) -> float | None:
        return _over(result, self.cap)
