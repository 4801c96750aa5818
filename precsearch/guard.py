"""Trials that cannot take the study down: any failure becomes a ``failed`` TrialResult.

:func:`run_guarded` is the trial boundary (the one place, with the CLI's entry point,
where a broad ``except`` belongs): bad user input still stops everything, anything else
fails that trial only. :class:`InProcess` runs trials guarded in this process, with the
same interface as :class:`~precsearch.worker.Worker`, which isolates them in another.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from precsearch.confirm import measure
from precsearch.errors import TrialFailed, UserInputError, is_resource_problem
from precsearch.policy import Policy
from precsearch.records import Budget, Fidelity, Measurement, ModelInfo, TrialResult

__all__ = ["InProcess", "classify", "failed_result", "run_guarded"]


def failed_result(policy: Policy, reason: str, detail: str = "") -> TrialResult:
    """A ``failed`` trial result carrying the reason (and detail for people)."""
    result = TrialResult(policy=policy.to_dict(), status="failed", reason=reason)
    if detail:
        result.numerics["detail"] = detail
    return result


def classify(exc: BaseException) -> tuple[str, str]:
    """(reason, detail) for an exception raised by a trial."""
    name = type(exc).__name__
    lines = str(exc).strip().splitlines()
    first = lines[0][:300] if lines else ""
    if is_resource_problem(exc):
        return "out of memory", f"{name}: {first}"
    if isinstance(exc, TrialFailed):
        return exc.reason, exc.detail
    tail = "".join(traceback.format_exception(exc)[-3:]).strip()
    return f"error: {name}: {first}", tail[-2000:]


def run_guarded(
    runner: Any, policy: Policy | None, budget: Budget | None = None, peer: str | None = None
) -> TrialResult:
    """Run a trial in this process; any failure but bad user input becomes ``failed``.

    Crashes and hangs are not isolated here: use :class:`Worker` for that.
    """
    try:
        return runner.run_trial(policy, budget, peer=peer)
    except UserInputError:
        raise
    except Exception as exc:
        reason, detail = classify(exc)
        return failed_result(policy or Policy(), reason, detail)


class InProcess:
    """Trials in this process: for notebooks with a callable, and for fast tests.

    Same interface as :class:`Worker`; a crash or hang here is not isolated.
    """

    def __init__(
        self,
        spec: Any,
        work_dir: str | os.PathLike[str] | None,
        budget: Budget | None = None,
        fidelity: Fidelity | None = None,
        batch_size: int | None = None,
        strategy: str = "none",
    ) -> None:
        from precsearch.runner import Runner

        self.runner = Runner(spec, work_dir, budget, fidelity, batch_size, strategy)
        self.model_info: ModelInfo = self.runner.info
        self._split = {key: self.runner.timings[key] for key in ("import", "build")}

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> dict[str, float]:
        """Nothing to start: the model was built in the constructor."""
        return {}

    def run_trial(
        self,
        policy: Policy | None,
        budget: Budget | None = None,
        timeout: float | None = None,
        peer: str | None = None,
    ) -> TrialResult:
        """Run one trial here (``timeout`` cannot be enforced in-process)."""
        result = run_guarded(self.runner, policy, budget, peer)
        if self._split:
            result.timings["import"] = self._split["import"]
            result.timings["setup"] = self._split["build"]
            self._split = {}
        return result

    def confirm(
        self,
        configs: list[tuple[str, Policy | None]],
        rounds: int,
        block: int,
        timeout: float | None = None,
    ) -> Measurement:
        """:func:`precsearch.confirm.measure` here."""
        return measure(self.runner, configs, rounds, block)

    def export(
        self,
        policy: Policy,
        exporters: list[str],
        directory: str | os.PathLike[str],
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """:meth:`Runner.export <precsearch.runner.Runner.export>` here."""
        return self.runner.export(policy, exporters, directory)

    def close(self) -> None:
        """Nothing to close."""
