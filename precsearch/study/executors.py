"""Executors: where a study's trials run, and the one way from the study to the engine.

:class:`Executor` is the protocol the study process drives: start (which builds the
model and gives its :class:`~precsearch.records.ModelInfo`), trials, the confirmation's
rounds (also the probes' speed), the probes' numerics, exports. Two kinds implement it:

* :class:`~precsearch.study.worker.Worker` (the default): an isolated worker process,
  so that a crash, hang or out-of-memory fails one trial and never the study;
* :class:`InProcess`: the same in this process (notebooks with a build function, fast
  tests). It imports the engine, and so TensorFlow, when it is made; nothing else on
  this side of the boundary does.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from precsearch.policy import Policy
from precsearch.records import Budget, Fidelity, Measurement, ModelInfo, ModelSpec, TrialResult
from precsearch.records.messages import Command, Reply
from precsearch.study.worker import CommandExecutor, Worker

if TYPE_CHECKING:
    from precsearch.engine.runner import Runner

__all__ = ["Executor", "InProcess", "Worker"]

_R = TypeVar("_R", bound=Reply)


class Executor(Protocol):
    """What a study drives: a model's trials, confirmation rounds and exports.

    ``start`` builds the model (in a worker: starts it) and sets ``model_info``; every
    other call may start it again after a crash. What happens to a trial comes back
    as a :class:`~precsearch.records.TrialResult` (``failed`` for a crash or timeout);
    only a broken model file raises (:class:`~precsearch.errors.UserInputError`).
    Both executors send each call as a command (:mod:`precsearch.records.messages`) to
    the worker's dispatch table (:mod:`precsearch.engine.serve`).
    """

    model_info: ModelInfo | None

    def start(self) -> dict[str, float]: ...

    def run_trial(
        self,
        policy: Policy | None,
        budget: Budget | None = None,
        timeout: float | None = None,
        peer: str | None = None,
    ) -> TrialResult: ...

    def confirm(
        self, configs: list[tuple[str, Policy | None]], orders: list[list[str]], block: int
    ) -> Measurement: ...

    def numerics(self, configs: list[tuple[str, Policy]]) -> dict[str, dict[str, Any]]: ...

    def export(
        self, policy: Policy, exporters: list[str], directory: str | os.PathLike[str]
    ) -> dict[str, Any]: ...

    def close(self) -> None: ...


class InProcess(CommandExecutor):
    """Trials in this process: for notebooks with a callable, and for fast tests.

    Same interface as :class:`Worker`, and the same commands, handed to the worker's own
    :func:`~precsearch.engine.serve.dispatch`; a crash or hang here is not isolated, and
    no ``timeout`` can be kept.
    """

    def __init__(
        self,
        spec: ModelSpec,
        work_dir: str | os.PathLike[str] | None,
        budget: Budget | None = None,
        fidelity: Fidelity | None = None,
        batch_size: int | None = None,
        strategy: str = "none",
    ) -> None:
        from precsearch.engine.runner import Runner

        self.runner: Runner = Runner(spec, work_dir, budget, fidelity, batch_size, strategy)
        self.model_info: ModelInfo = self.runner.info
        self._split = {key: self.runner.timings[key] for key in ("import", "build")}

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> dict[str, float]:
        """Nothing to start: the model was built in the constructor."""
        return {}

    def answer(self, command: Command[_R], timeout: float | None = None) -> _R:
        """The reply to ``command`` from the worker's dispatch table, run here."""
        from precsearch.engine.serve import dispatch

        return dispatch(self.runner, command)

    def run_trial(
        self,
        policy: Policy | None,
        budget: Budget | None = None,
        timeout: float | None = None,
        peer: str | None = None,
    ) -> TrialResult:
        """Run one trial here (``timeout`` cannot be enforced in-process)."""
        result = self.answer(self.trial_command(policy, budget, peer)).result
        if self._split:
            result.timings["import"] = self._split["import"]
            result.timings["setup"] = self._split["build"]
            self._split = {}
        return result

    def close(self) -> None:
        """Nothing to close."""
