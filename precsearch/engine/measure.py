"""The confirmation's measuring, in the worker: labelled configurations timed in rounds.

The study side (:mod:`precsearch.study.confirm`) says what to time, in which order, and
decides on the figures; this module times the configurations (:func:`measure`),
interleaved in one process, with :func:`precsearch.engine.instrument.timed_rounds`.
The study asks for rounds a few at a time until its figures are precise enough, so each
configuration's traced model is kept on the Runner between calls (tracing a MobileNet
costs seconds; :meth:`Runner.timed <precsearch.engine.runner.Runner.timed>`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from precsearch.engine.guarded import classify
from precsearch.engine.instrument import timed_rounds
from precsearch.errors import TrialFailed, UserInputError
from precsearch.policy import Policy
from precsearch.records import Measurement

if TYPE_CHECKING:
    from precsearch.engine.runner import Runner

__all__ = ["measure"]


def measure(
    runner: Runner, configs: list[tuple[str, Policy | None]], orders: list[list[str]], block: int
) -> Measurement:
    """Time labelled configurations round by round.

    Args:
        runner: The worker's Runner, which keeps the traced configurations.
        configs: ``(label, policy)``; the policy ``None`` stands for TensorFlow's graph
            rewrite of the user's FP32 training.
        orders: Per round, the labels in the order they run.
        block: Least calls per timed block.

    Returns:
        The :class:`~precsearch.records.Measurement`.

    Raises:
        TrialFailed: A configuration cannot be timed (it raised while traced, compiled
            or warmed up: XLA without a kernel for one of its ops, say), with the reason
            a failed trial would give. A worker's command fails so whatever raises; this
            makes the in-process executor fail alike, and not with TensorFlow's error.
    """
    timed = []
    for label, given in configs:
        try:
            timed.append(runner.timed(label, given, block))
        except UserInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - this configuration's failure, not the worker's
            raise TrialFailed(classify(exc)[0]) from exc
    rates = timed_rounds(timed, orders, runner.clock)
    return Measurement(rates=rates, steps={t.label: t.steps for t in timed}, orders=orders)
