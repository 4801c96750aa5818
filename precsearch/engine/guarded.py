"""The trial boundary: any failure of a trial becomes a ``failed`` TrialResult.

:func:`run_guarded` is the one place, with the CLI's entry point, where a broad
``except`` belongs: bad user input still stops everything, anything else fails that
trial only. The worker process (:mod:`precsearch.engine.serve`) and the in-process
executor (:class:`precsearch.study.executors.InProcess`) both run trials through it.
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING

from precsearch.errors import TrialFailed, UserInputError, is_resource_problem, one_line
from precsearch.policy import Policy
from precsearch.records import Budget, TrialResult

if TYPE_CHECKING:
    from precsearch.engine.runner import Runner

__all__ = ["classify", "run_guarded"]


def classify(exc: BaseException, batch_size: int | None = None) -> tuple[str, str]:
    """(reason, detail) for an exception raised by a trial (at ``batch_size``, if known:
    "out of memory at batch 512" tells which setting the device could not hold).

    The reason keeps the underlying message: Keras re-raises an error inside a layer's
    ``call`` with its own first line ("Exception encountered when calling X.call()"),
    which says where but not what (:func:`precsearch.errors.one_line` looks past it).
    """
    if is_resource_problem(exc):
        where = f" at batch {batch_size}" if batch_size else ""
        return f"out of memory{where}", one_line(exc, limit=300)
    if isinstance(exc, TrialFailed):
        return exc.reason, exc.detail
    tail = "".join(traceback.format_exception(exc)[-3:]).strip()
    return f"error: {one_line(exc, limit=300)}", tail[-2000:]


def run_guarded(
    runner: Runner, policy: Policy | None, budget: Budget | None = None, peer: str | None = None
) -> TrialResult:
    """Run a trial in this process (:meth:`Runner.try_policy
    <precsearch.engine.runner.Runner.try_policy>`); any failure but bad user input
    becomes ``failed``.

    Crashes and hangs are not isolated here: a worker process isolates them.
    """
    try:
        return runner.try_policy(policy, budget, peer=peer)
    except UserInputError:
        raise
    except Exception as exc:
        batch_size = runner.problem.normalise(policy).batch_size if policy else None
        reason, detail = classify(exc, batch_size)
        return TrialResult.failed(policy or Policy(), reason, detail)
