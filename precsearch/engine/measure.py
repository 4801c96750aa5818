"""The confirmation's measuring, in the worker: labelled configurations timed in rounds.

The study side (:mod:`precsearch.study.confirm`) says what to time and decides on the
figures; this module builds the models and times them (:func:`measure`), interleaved in
one process, with :func:`precsearch.engine.instrument.timed_rounds`.
"""

from __future__ import annotations

import contextlib
from typing import Any

from precsearch.engine.instrument import Timed, timed_rounds
from precsearch.engine.peers import GraphRewrite
from precsearch.policy import Policy
from precsearch.records import Measurement

__all__ = ["measure"]


def measure(
    runner: Any, configs: list[tuple[str, Policy | None]], rounds: int, block: int
) -> Measurement:
    """Time labelled configurations round by round.

    Args:
        runner: A :class:`~precsearch.engine.runner.Runner`.
        configs: ``(label, policy)``; the policy ``None`` stands for TensorFlow's graph
            rewrite of the user's FP32 training.
        rounds: Rounds; every ratio compares two configurations within one round.
        block: Least calls per timed block.

    Returns:
        The :class:`~precsearch.records.Measurement`.
    """
    problem = runner.problem
    rewrite = GraphRewrite(problem)
    timed = []
    for label, given in configs:
        peer = given is None
        policy = problem.normalise(rewrite.policy() if peer else given)
        timed.append(
            Timed(
                label=label,
                model=(rewrite.build if peer else problem.model_for)(policy, seed=0),
                iterator=problem.iterator(policy.batch_size, seed=0),
                samples_per_call=policy.batch_size * problem.steps_per_execution,
                context=rewrite.context if peer else contextlib.nullcontext,
            )
        )
    rates = timed_rounds(timed, rounds, block, warmup=runner.budget.warmup)
    return Measurement(rates=rates, steps={t.label: t.steps for t in timed})
