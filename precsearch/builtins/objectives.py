"""The built-in objectives: speedup (maximised) and the fidelity gap (minimised)."""

from __future__ import annotations

import math

from precsearch.errors import UserInputError
from precsearch.plugins import Objective
from precsearch.records import TrialResult

__all__ = ["FidelityGap", "Speedup"]


class Speedup(Objective):
    """Samples/s over FP32's, maximised (see the module doc).

    A too-slow trial scores the watchdog's estimate (1 / slowdown), a trial that never
    got timed scores 0, so that samplers still learn from them.
    """

    name = "speedup"
    direction = "maximize"

    def value(self, result: TrialResult, reference: TrialResult | None) -> float:
        if result.speedup is not None:
            return float(result.speedup)
        slowdown = result.numerics.get("watchdog_slowdown")
        return 1.0 / slowdown if slowdown else 0.0


class FidelityGap(Objective):
    """The fidelity gap, minimised; its constraint is feasibility.

    A trial stopped before it was judged (too slow) or whose loss went non-finite has no
    gap: its value is ``inf``, which Optuna stores and its plots (``optuna.visualization``,
    optuna-dashboard) leave out, rather than a large number that would stretch their
    axes. Samplers learn from such a trial through its constraint (Optuna 5's TPE and
    NSGA-II rank infeasible trials by it and ignore their values).

    Args:
        arg: The tolerance in FP32 bands (default 1.0).
    """

    name = "fidelity"
    direction = "minimize"

    def __init__(self, arg: str | None = None) -> None:
        super().__init__(arg)
        try:
            self.tolerance = float(arg) if arg else 1.0
        except ValueError:
            raise UserInputError(f"fidelity={arg!r}: expected a tolerance number") from None
        if not self.tolerance > 0:
            raise UserInputError(f"fidelity={arg!r}: expected a positive tolerance")

    def value(self, result: TrialResult, reference: TrialResult | None) -> float:
        gap = result.fidelity_gap
        if result.numerics.get("nonfinite_step") is not None or gap is None:
            return math.inf
        return float(gap)

    def constraint(self, result: TrialResult, reference: TrialResult | None) -> float:
        """``gap - tolerance`` for a trial that trained like FP32 (≤ 0); for any other,
        1 plus how far its gap is over the tolerance (1 when it has no gap). Always finite:
        optuna-dashboard sends constraints as JSON, which has no infinity."""
        gap = self.value(result, reference)
        if result.status == "ok":
            return gap - self.tolerance
        return 1.0 + (max(0.0, gap - self.tolerance) if math.isfinite(gap) else 0.0)
