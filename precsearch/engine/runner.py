"""The trial engine of one process: a problem, its FP32 references and timing models.

A :class:`Runner` is what a worker process holds for its whole life. It builds the
user's :class:`~precsearch.engine.problem.Problem` once, keeps one traced FP32 model of the
user's own training for timing (the one its first reference runs traced: tracing
dominates a trial's set-up, MobileNetV2 ~12 s), keeps the
:class:`~precsearch.engine.references.References`, and runs on them:

* :meth:`Runner.run_trial` — one trial (:mod:`precsearch.engine.trial`);
* :meth:`Runner.train` and :meth:`Runner.export` — the winner trained for the budget
  and handed to model exporters.

The confirmation's measurement runs on a Runner too (:func:`precsearch.engine.measure.measure`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from precsearch.engine.fidelity import assess, judging_note
from precsearch.engine.instrument import step
from precsearch.engine.measure import keep_peer
from precsearch.engine.memory import PeakMemory, release, rss_mb
from precsearch.engine.peers import GraphRewrite
from precsearch.engine.problem import Problem, import_tensorflow
from precsearch.engine.references import References
from precsearch.engine.trial import run_trial
from precsearch.errors import TrialFailed, UserInputError
from precsearch.files import write_text_atomic
from precsearch.policy import Policy
from precsearch.records import (
    Budget,
    Fidelity,
    ModelSpec,
    Reference,
    TrialResult,
    Winner,
)

__all__ = ["Runner"]


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
    ) -> None:
        t0 = time.perf_counter()
        import_tensorflow()  # timed on its own: the import split

        self.timings: dict[str, float] = {"import": time.perf_counter() - t0}
        t0 = time.perf_counter()
        self.problem = Problem(spec, batch_size, strategy)
        self.timings["build"] = time.perf_counter() - t0
        self.spec = spec
        self.info = self.problem.info
        self.budget = budget or Budget()
        self.fidelity = fidelity or Fidelity()
        self.work_dir = Path(work_dir) if work_dir is not None else None
        if self.work_dir is not None:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(
                self.work_dir / "model_info.json", json.dumps(self.info.to_dict(), indent=2)
            )
        self._timing: tuple[Any, Any] | None = None
        # The confirmation's traced configurations, kept between its calls
        # (precsearch.engine.measure).
        self.timed_cache: dict[tuple[str, str, int], Any] = {}
        self.traced_models: dict[tuple[bool, str], Any] = {}
        self.references = References(self.problem, self.work_dir, keep=self._keep)

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

    def _twin(self, config: Policy, budget: Budget, own: Reference | None) -> Reference:
        """A candidate's FP32 twin under ``config`` (its batch size and XLA setting),
        asked for once the candidate has trained to the end: ``own``, the candidate's own
        run when it is FP32 (kept for later candidates), else trained now (cached)."""
        if own is not None:
            return self.references.keep(config, budget, own)
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

    def run_trial(
        self, policy: Policy, budget: Budget | None = None, peer: str | None = None
    ) -> TrialResult:
        """Train and time one candidate policy against the user's FP32 training
        (:mod:`precsearch.engine.trial`).

        With ``peer="graph_rewrite"`` the candidate is TensorFlow's own graph rewrite
        of the user's FP32 training (:mod:`precsearch.engine.peers`; ``policy`` is ignored),
        and ``numerics["rewrite_applied"]`` says whether it changed anything here.
        """
        budget = budget or self.budget
        problem = self.problem
        rewrite = GraphRewrite(problem) if peer == "graph_rewrite" else None
        policy = problem.normalise(rewrite.policy() if rewrite else policy)
        memory = PeakMemory(problem.tf, gpu=bool(self.info.gpus))
        t0 = time.perf_counter()
        reference = self.reference(budget=budget)
        judging = self.judging(reference)
        fp32 = self.timing_model()
        base = problem.baseline()
        same = None
        if (policy.batch_size, policy.jit_compile) != (base.batch_size, base.jit_compile):
            config = Policy(
                batch_size=policy.batch_size,
                lr_rule=policy.lr_rule,
                base_batch_size=problem.batch_size,
                jit_compile=policy.jit_compile,
            )
            same = functools.partial(self._twin, config, budget)
        spent = time.perf_counter() - t0
        build = None
        if rewrite is not None:

            def build(policy: Policy, seed: int = 0) -> Any:
                model = rewrite.build(policy, seed=seed)
                keep_peer(self, model, rewrite)  # for the fresh rounds, traced once
                return model

        result = run_trial(
            problem, policy, budget, self.fidelity, reference, fp32, memory, same,
            rewrite.context if rewrite else contextlib.nullcontext, build,
        )  # fmt: skip
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

    def train(self, policy: Policy) -> tuple[Any, list[float]]:
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
        model, losses = self.train(policy)
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
