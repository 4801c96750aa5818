"""The confirmation's measuring, in the worker: labelled configurations timed in rounds.

The study side (:mod:`precsearch.study.confirm`) says what to time, in which order, and
decides on the figures; this module builds the models and times them (:func:`measure`),
interleaved in one process, with :func:`precsearch.engine.instrument.timed_rounds`.
The study asks for rounds a few at a time until its figures are precise enough, so a
configuration's traced model is kept on the Runner between calls (tracing a MobileNet
costs seconds; the selection and the fresh rounds time the same FP32 models).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from precsearch.engine.instrument import Timed, prepare, timed_rounds
from precsearch.engine.peers import GraphRewrite
from precsearch.policy import Policy
from precsearch.records import Measurement

__all__ = ["measure"]


def _timed(runner: Any, label: str, given: Policy | None, block: int) -> Timed:
    """The traced configuration for ``(label, policy)``, built once per Runner: two
    labels with one policy (FP32 and its copy) are two models."""
    key = (label, json.dumps(given.to_dict() if given else None, sort_keys=True), block)
    cache = runner.timed_cache
    if key not in cache:
        problem = runner.problem
        peer = given is None
        rewrite = GraphRewrite(problem)
        policy = problem.normalise(rewrite.policy() if peer else given)
        config = Timed(
            label=label,
            model=(rewrite.build if peer else problem.model_for)(policy, seed=0),
            iterator=problem.iterator(policy.batch_size, seed=0),
            samples_per_call=policy.batch_size * problem.steps_per_execution,
            context=rewrite.context if peer else contextlib.nullcontext,
        )
        cache[key] = prepare(config, block, warmup=runner.budget.warmup)
    return cache[key]


def measure(
    runner: Any, configs: list[tuple[str, Policy | None]], orders: list[list[str]], block: int
) -> Measurement:
    """Time labelled configurations round by round.

    Args:
        runner: A :class:`~precsearch.engine.runner.Runner`.
        configs: ``(label, policy)``; the policy ``None`` stands for TensorFlow's graph
            rewrite of the user's FP32 training.
        orders: Per round, the labels in the order they run.
        block: Least calls per timed block.

    Returns:
        The :class:`~precsearch.records.Measurement`.
    """
    timed = [_timed(runner, label, given, block) for label, given in configs]
    rates = timed_rounds(timed, orders)
    return Measurement(rates=rates, steps={t.label: t.steps for t in timed}, orders=orders)
