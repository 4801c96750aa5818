"""The confirmation's measuring, in the worker: labelled configurations timed in rounds.

The study side (:mod:`precsearch.study.confirm`) says what to time, in which order, and
decides on the figures; this module builds the models and times them (:func:`measure`),
interleaved in one process, with :func:`precsearch.engine.instrument.timed_rounds`.
The study asks for rounds a few at a time until its figures are precise enough, so a
configuration's traced model is kept on the Runner between calls (tracing a MobileNet
costs seconds). One traced model serves every label with its policy (the selection's
candidate and the fresh rounds' winner) except that FP32's copy is a model of its own,
and the user's FP32 training is the one the trials were timed against
(:meth:`~precsearch.engine.runner.Runner.timing_model`): the probes, the trials and the
confirmation trace it once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

from precsearch.engine.instrument import Timed, prepare, timed_rounds
from precsearch.engine.peers import GraphRewrite
from precsearch.policy import Policy
from precsearch.records import GRAPH_REWRITE, Measurement

__all__ = ["keep_peer", "measure"]


def _is_own(problem: Any, policy: Policy) -> bool:
    """Whether ``policy`` is the user's own training: FP32 at their batch size and XLA
    setting (its LR rule and loss-scale settings change nothing there)."""
    return policy.rule_dtypes() == {"float32"} and (policy.batch_size, policy.jit_compile) == (
        problem.batch_size,
        problem.jit_compile,
    )


def _role(label: str, given: Policy | None) -> tuple[bool, str]:
    """The traced-model key: FP32's copy apart, else one per policy (``None``: the
    graph rewrite)."""
    return label == "null", json.dumps(given.to_dict() if given else None, sort_keys=True)


def keep_peer(runner: Any, model: Any, rewrite: GraphRewrite) -> None:
    """Keep the graph rewrite's trial model, traced under its context, for the fresh
    rounds (a second trace of a MobileNet costs seconds; its weights do not matter)."""
    problem = runner.problem
    policy = problem.normalise(rewrite.policy())
    runner.traced_models[_role(GRAPH_REWRITE, None)] = Timed(
        label=GRAPH_REWRITE,
        model=model,
        iterator=problem.iterator(policy.batch_size, seed=0),
        samples_per_call=policy.batch_size * problem.steps_per_execution,
        context=rewrite.context,
    )


def _traced(runner: Any, label: str, given: Policy | None) -> Timed:
    """A traced model and its data stream for ``(label, policy)`` (steps not sized)."""
    problem = runner.problem
    peer = given is None
    rewrite = GraphRewrite(problem)
    policy = problem.normalise(rewrite.policy() if peer else given)
    if label != "null" and not peer and _is_own(problem, policy):
        model, iterator = runner.timing_model()
    else:
        model = (rewrite.build if peer else problem.model_for)(policy, seed=0)
        iterator = problem.iterator(policy.batch_size, seed=0)
    return Timed(
        label=label,
        model=model,
        iterator=iterator,
        samples_per_call=policy.batch_size * problem.steps_per_execution,
        context=rewrite.context if peer else contextlib.nullcontext,
    )


def _timed(runner: Any, label: str, given: Policy | None, block: int) -> Timed:
    """The prepared configuration for ``(label, policy)`` at ``block``, built once per
    Runner on a traced model shared by every label with that policy but FP32's copy."""
    role = _role(label, given)
    key = (label, role[1], block)
    cache, models = runner.timed_cache, runner.traced_models
    if key not in cache:
        if role not in models:
            models[role] = _traced(runner, label, given)
        config = dataclasses.replace(models[role], label=label)
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
