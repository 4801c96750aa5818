"""The trial engine of one process: a problem, its FP32 references and timing models.

A :class:`Runner` is what a worker process holds for its whole life. It builds the
user's :class:`~precsearch.engine.problem.Problem` once, keeps one traced FP32 model of the
user's own training for timing (the one its first reference runs traced: tracing
dominates a trial's set-up, MobileNetV2 ~12 s), keeps the
:class:`~precsearch.engine.references.References`, and runs on them:

* :meth:`Runner.try_policy` — one trial (:mod:`precsearch.engine.trial`);
* :meth:`Runner.export` — the winner trained for the budget and handed to model
  exporters;
* :meth:`Runner.timed` — the confirmation's configurations
  (:func:`precsearch.engine.measure.measure`), traced once and kept between its calls:
  one traced model serves every label with its policy (the selection's candidate and
  the fresh rounds' winner) except that FP32's copy is a model of its own, and the
  user's FP32 training is the one the trials were timed against
  (:meth:`Runner.timing_model`): the probes, the trials and the confirmation trace it
  once. The Runner alone writes these caches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from precsearch.backend import import_backend
from precsearch.engine.fidelity import assess, judging_note
from precsearch.engine.instrument import Timed, prepare, step
from precsearch.engine.memory import PeakMemory, release, rss_mb
from precsearch.engine.peers import GraphRewrite
from precsearch.engine.problem import Problem
from precsearch.engine.references import References
from precsearch.engine.trial import TrialSetup, train_time_and_judge
from precsearch.errors import TrialFailed, UserInputError
from precsearch.files import write_text_atomic
from precsearch.policy import Policy
from precsearch.records import (
    GRAPH_REWRITE,
    Budget,
    Fidelity,
    ModelSpec,
    Reference,
    TrialResult,
    Winner,
)

__all__ = ["Runner"]

TracedKey = tuple[bool, str]  # (FP32's copy?, the policy's JSON; "null": the graph rewrite)


def _traced_key(label: str, given: Policy | None) -> TracedKey:
    """The traced-model key: FP32's copy apart, else one per policy (``None``: the
    graph rewrite)."""
    return label == "null", json.dumps(given.to_dict() if given else None, sort_keys=True)


def _is_users_training(problem: Problem, policy: Policy) -> bool:
    """Whether ``policy`` is the user's own training: FP32 at their batch size and XLA
    setting (its LR rule and loss-scale settings change nothing there)."""
    return policy.rule_dtypes() == {"float32"} and (policy.batch_size, policy.jit_compile) == (
        problem.batch_size,
        problem.jit_compile,
    )


class Runner:
    """One model problem, built once, on which trials are run in this process.

    Args:
        spec: Where the model and data come from.
        work_dir: Where ``model_info.json`` and the FP32 references are cached
            (nothing is written when ``None``).
        budget: Default budget of each trial.
        fidelity: How closely trials must follow FP32.
        batch_size: The model's own batch size (default: ``precsearch_config`` or 32).
        strategy: ``"none"`` or ``"mirrored"`` (see :class:`~precsearch.engine.problem.Problem`).
        clock: Reads the time, in seconds, of every timed call (trials' blocks and the
            confirmation's rounds); tests give one whose calls take a known time.

    Attributes:
        problem: The model and data.
        info: The model's :class:`~precsearch.records.ModelInfo`.
        timings: Seconds spent importing TensorFlow and building the problem.

    Raises:
        UserInputError: The model file's functions break the contract.
    """

    def __init__(
        self,
        spec: ModelSpec,
        work_dir: str | os.PathLike[str] | None = None,
        budget: Budget | None = None,
        fidelity: Fidelity | None = None,
        batch_size: int | None = None,
        strategy: str = "none",
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        t0 = time.perf_counter()
        import_backend()  # timed on its own: the import split

        self.timings: dict[str, float] = {"import": time.perf_counter() - t0}
        t0 = time.perf_counter()
        self.problem = Problem(spec, batch_size, strategy)
        self.timings["build"] = time.perf_counter() - t0
        self.spec = spec
        self.info = self.problem.info
        self.budget = budget or Budget()
        self.fidelity = fidelity or Fidelity()
        self.clock = clock
        self.work_dir = Path(work_dir) if work_dir is not None else None
        if self.work_dir is not None:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(
                self.work_dir / "model_info.json", json.dumps(self.info.to_dict(), indent=2)
            )
        self._timing: tuple[Any, Any] | None = None
        self._traced_models: dict[TracedKey, Timed] = {}
        self._timed_cache: dict[tuple[str, str, int], Timed] = {}
        self.references = References(self.problem, self.work_dir, keep=self._keep)

    @property
    def traced_models(self) -> Mapping[TracedKey, Timed]:
        """The confirmation's traced models (read-only), by :func:`_traced_key`."""
        return MappingProxyType(self._traced_models)

    @property
    def timed_cache(self) -> Mapping[tuple[str, str, int], Timed]:
        """The confirmation's prepared configurations (read-only), by label, policy and
        block."""
        return MappingProxyType(self._timed_cache)

    def _keep(self, model: Any, iterator: Any) -> None:
        # A traced FP32 model whose weights do not matter is all the timing needs.
        self._timing = self._timing or (model, iterator)

    def timing_model(self) -> tuple[Any, Any]:
        """The FP32 model of the user's training that candidates are timed against,
        traced once, and its data stream."""
        if self._timing is None:
            problem = self.problem
            model = problem.model_for(problem.baseline(), seed=0)
            iterator = problem.iterator(problem.batch_size, seed=0)
            for _ in range(1 + self.budget.warmup):
                step(model, iterator)
            self._timing = (model, iterator)
        return self._timing

    def reference(
        self,
        policy: Policy | None = None,
        seeds: Sequence[int] | None = None,
        budget: Budget | None = None,
    ) -> Reference:
        """FP32 runs from the initial weights, one per data-order seed (default the
        noise's, :func:`~precsearch.engine.references.noise_seeds`), for ``budget``'s
        samples (default the runner's); cached. By default the user's own training,
        whose runs are the noise every trial is judged against."""
        policy = policy or self.problem.baseline()
        return self.references.get(policy, budget or self.budget, seeds)

    def _fp32_twin(
        self, config: Policy, budget: Budget, candidate_run: Reference | None
    ) -> Reference:
        """A candidate's FP32 twin under ``config`` (its batch size and XLA setting),
        asked for once the candidate has trained to the end: ``candidate_run``, the
        candidate's own run when it is FP32 (kept for later candidates), else trained now
        (cached)."""
        if candidate_run is not None:
            return self.references.keep(config, budget, candidate_run)
        return self.reference(config, seeds=(0,), budget=budget)

    def judging(self, reference: Reference) -> str:
        """What cannot judge a candidate at this budget, in one line ("" when everything
        can; :func:`~precsearch.engine.fidelity.assess`).

        Raises:
            UserInputError: Nothing can: no trial could be told from FP32.
        """
        assessment = assess(reference)
        if assessment and all(assessment.values()):
            raise UserInputError(
                f"{self.spec.source}: nothing can judge a candidate at {reference.steps} "
                f"steps: {'; '.join(assessment.values())}; raise --steps, or add val_data()"
            )
        return judging_note(assessment, reference.steps)

    def try_policy(
        self, policy: Policy | None, budget: Budget | None = None, peer: str | None = None
    ) -> TrialResult:
        """One trial: train and time a candidate policy against the user's FP32 training
        and judge it (:mod:`precsearch.engine.trial`), the references it needs first.

        With ``peer="graph_rewrite"`` the candidate is TensorFlow's own graph rewrite
        of the user's FP32 training (:mod:`precsearch.engine.peers`; ``policy`` is ignored),
        and ``numerics["rewrite_applied"]`` says whether it changed anything here.
        """
        budget = budget or self.budget
        problem = self.problem
        rewrite = GraphRewrite(problem) if peer == GRAPH_REWRITE else None
        policy = problem.normalise(rewrite.policy() if rewrite else policy)
        if rewrite is not None and not problem.backend.exact_rewrite:
            return TrialResult(
                policy=policy.to_dict(),
                status="failed",
                reason=f"not available on Keras's {problem.backend.name} backend",
                numerics={"rewrite_applied": False},
            )
        memory = PeakMemory(problem.backend, gpu=bool(self.info.gpus))
        t0 = time.perf_counter()
        reference = self.reference(budget=budget)
        judging = self.judging(reference)
        setup = TrialSetup(
            problem=problem,
            budget=budget,
            fidelity=self.fidelity,
            reference=reference,
            fp32=self.timing_model(),
            memory=memory,
            fp32_twin=self._twin_maker(policy, budget),
            clock=self.clock,
        )
        spent = time.perf_counter() - t0
        if rewrite is not None:
            setup = dataclasses.replace(
                setup, context=rewrite.context, build=functools.partial(self._build_peer, rewrite)
            )
        result = train_time_and_judge(policy, setup)
        base = problem.baseline()
        if rewrite is not None and result.curve["loss"] and not base.jit_compile:
            # From the same weights and data, an untouched graph gives FP32's first loss
            # to the bit. (Against XLA FP32 runs the numbers differ anyway: not known.)
            first = reference.curves[0][0] if reference.curves[0] else None
            result.numerics["rewrite_applied"] = result.curve["loss"][0] != first
        if judging:
            result.numerics["judging"] = judging
        result.timings["reference"] = result.timings.get("reference", 0.0) + spent
        result.timings["total"] += spent
        release()  # the candidate is gone; its memory goes back before the next trial
        result.numerics["rss_after_mb"] = rss_mb()
        return result

    def _twin_maker(
        self, policy: Policy, budget: Budget
    ) -> Callable[[Reference | None], Reference] | None:
        """What gives a candidate its FP32 twin, when its batch size or XLA setting
        differ from the user's (``None`` otherwise: the user's training is the twin)."""
        base = self.problem.baseline()
        if (policy.batch_size, policy.jit_compile) == (base.batch_size, base.jit_compile):
            return None
        config = Policy(
            batch_size=policy.batch_size,
            lr_rule=policy.lr_rule,
            base_batch_size=self.problem.batch_size,
            jit_compile=policy.jit_compile,
        )
        return functools.partial(self._fp32_twin, config, budget)

    def _build_peer(self, rewrite: GraphRewrite, policy: Policy, seed: int = 0) -> Any:
        """The graph rewrite's trial model, kept for the confirmation's fresh rounds,
        traced under its context once (a second trace of a MobileNet costs seconds; its
        weights do not matter there)."""
        model = rewrite.build(policy, seed=seed)
        problem = self.problem
        normal = problem.normalise(rewrite.policy())
        self._traced_models[_traced_key(GRAPH_REWRITE, None)] = Timed(
            label=GRAPH_REWRITE,
            model=model,
            iterator=problem.iterator(normal.batch_size, seed=0),
            samples_per_call=normal.batch_size * problem.steps_per_execution,
            context=rewrite.context,
        )
        return model

    def timed(self, label: str, given: Policy | None, block: int) -> Timed:
        """The confirmation's configuration ``(label, policy)`` at ``block``, warmed up
        and its blocks sized (:func:`~precsearch.engine.instrument.prepare`), built once
        per Runner on a traced model shared by every label with that policy but FP32's
        copy (the policy ``None``: TensorFlow's graph rewrite)."""
        role = _traced_key(label, given)
        key = (label, role[1], block)
        if key not in self._timed_cache:
            if role not in self._traced_models:
                self._traced_models[role] = self._trace(label, given)
            config = dataclasses.replace(self._traced_models[role], label=label)
            self._timed_cache[key] = prepare(
                config, block, self.budget.warmup, self.clock, self.budget.block_time
            )
        return self._timed_cache[key]

    def _trace(self, label: str, given: Policy | None) -> Timed:
        """A traced model and its data stream for ``(label, policy)`` (steps not sized)."""
        problem = self.problem
        peer = given is None
        rewrite = GraphRewrite(problem)
        policy = problem.normalise(rewrite.policy() if peer else given)
        if label != "null" and not peer and _is_users_training(problem, policy):
            model, iterator = self.timing_model()
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

    def _train_for_budget(self, policy: Policy) -> tuple[Any, list[float]]:
        """Train a model under ``policy`` on the budget's samples, as a trial does (same
        initial weights, data order and seed); return it and its loss per call."""
        problem = self.problem
        policy = problem.normalise(policy)
        model = problem.model_for(policy, seed=0)
        iterator = problem.iterator(policy.batch_size, seed=0)
        per_call = policy.batch_size * problem.steps_per_execution
        losses = []
        for _ in range(self.budget.calls(per_call, problem.batch_size, timed=False)):
            losses.append(step(model, iterator)[1])
            if not math.isfinite(losses[-1]):
                break
        return model, losses

    def export(
        self, policy: Policy, exporters: list[str], directory: str | os.PathLike[str]
    ) -> dict[str, Any]:
        """Train under ``policy`` for the budget, then run model exporters on the result.

        Args:
            policy: The winner (its manifest travels into what is exported).
            exporters: Names (``NAME`` or ``NAME=ARG``) of exporters with ``needs_model``.
            directory: Where they write.

        Returns:
            ``{"paths": [...], "steps", "final_loss"}``.
        """
        from precsearch.plugins import create

        instances = [create("exporter", spec) for spec in exporters]
        model, losses = self._train_for_budget(policy)
        if not losses or not math.isfinite(losses[-1]):
            raise TrialFailed("export failed", "the loss became non-finite while training")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths: list[str] = []
        for exporter in instances:
            paths += [
                str(p) for p in exporter.export(Winner(policy=policy, model=model), directory)
            ]
        return {"paths": paths, "steps": len(losses), "final_loss": losses[-1]}
