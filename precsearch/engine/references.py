"""FP32 reference runs: the band of FP32 training that candidates are judged against.

The user's own training (their batch size, XLA setting and steps per call) is trained in
FP32 from the initial weights once per data-order seed 1..n (``budget.ref_seeds``) for
the budget's samples; the spread between seeds is the noise of
:mod:`precsearch.engine.fidelity`. Candidates train with seed 0 and seeds of their own
(:func:`candidate_seeds`, :func:`runs_on_own_seeds`), none of which these runs use: each
candidate is judged as draws held out from the runs that measure the noise. A single run
with seed 0 at a candidate's batch size and XLA setting is its FP32 twin: what precision
alone changes (an FP32 candidate's own training is its twin, kept for later candidates
at its batch size). One traced model serves every seed (its weights
and optimizer state are restored between runs), the validation figures at the initial
weights are measured once, and the runs are cached in memory and, with a work folder,
in a JSON file per model fingerprint, batch size, LR rule, step count and seeds, written
atomically so that other workers reading the folder never see half a file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from precsearch.engine.instrument import step
from precsearch.engine.problem import Problem
from precsearch.engine.quality_test import stated_rates
from precsearch.files import write_text_atomic
from precsearch.policy import Policy
from precsearch.records import Budget, Fidelity, Reference

__all__ = ["References", "candidate_runs", "candidate_seeds", "noise_seeds", "runs_on_own_seeds"]

FEWEST_RUNS, MOST_RUNS = 3, 8  # of a candidate's runs judged against FP32's
POWER_TARGET = 0.8  # the quality test's power the candidate's runs are sized for


def noise_seeds(budget: Budget) -> tuple[int, ...]:
    """The data-order seeds of the runs that measure FP32's noise: 1 to
    ``budget.ref_seeds`` (a candidate's own seed, 0, is held out)."""
    return tuple(range(1, budget.ref_seeds + 1))


def candidate_runs(reference: Reference, fidelity: Fidelity) -> int:
    """How many runs judge a candidate against ``reference`` (FP32's n runs): the fewest,
    from 3 to 8, with which the test (at ``fidelity``'s level and tolerance) catches a
    candidate 2 noise units worse on one of the k figures that judge ``POWER_TARGET`` of
    the time (:func:`precsearch.engine.quality_test.stated_rates`; with 12 FP32 runs: 3 for
    one figure, 4 for two or three; fewer FP32 runs need more); 3 where no number does
    (about 5 FP32 runs or fewer: a weaker test, its power in the manifest)."""
    from precsearch.engine.fidelity import assess

    n, k = len(reference.curves), sum(not why for why in assess(reference).values())
    rates = (stated_rates(n, m, k, fidelity.alpha, fidelity.tolerance)["power"]
             for m in range(FEWEST_RUNS, MOST_RUNS + 1))  # fmt: skip
    return next((FEWEST_RUNS + i for i, power in enumerate(rates) if power >= POWER_TARGET),
                FEWEST_RUNS)  # fmt: skip


def candidate_seeds(policy: Policy, run_count: int) -> tuple[int, ...]:
    """A candidate's data-order seeds for ``run_count`` runs (at most ``MOST_RUNS``): 0
    (its timed run, its FP32 twin's seed) and the rest of its own, from its policy, above
    any noise run's, so that two policies rarely share them (candidates of equal quality
    then do not fail or pass together on one draw) while a policy tried again gets the
    same ones."""
    text = json.dumps(policy.to_dict(), sort_keys=True)
    first = 10_000 + zlib.crc32(text.encode()) % 1_000_000 * MOST_RUNS
    return (0, *range(first, first + min(run_count, MOST_RUNS) - 1))


def runs_on_own_seeds(
    problem: Problem,
    model: Any,
    start: list[Any],
    calls: int,
    policy: Policy,
    context: Callable[[], Any],
    run_count: int,
) -> list[dict[str, Any]]:
    """A candidate's traced ``model`` trained again from the initial weights (optimizer
    state ``start``) for ``calls`` calls on each of its own data-order seeds
    (``run_count`` runs with its timed one: :func:`candidate_runs`), untimed, until one
    goes non-finite (that decides the verdict): per run ``{seed, loss, val_loss,
    val_metric, nonfinite_step}``, ``loss`` its smoothed final training loss
    (:func:`precsearch.engine.fidelity.window_mean`)."""
    from precsearch.engine.fidelity import window_mean

    batch_size = policy.batch_size or problem.batch_size
    per_call, own_runs = batch_size * problem.steps_per_execution, []
    for seed in candidate_seeds(policy, run_count)[1:]:
        problem.restore(model, start)
        iterator, losses = problem.iterator(batch_size, seed=seed), []
        while len(losses) < calls and (not losses or math.isfinite(losses[-1])):
            with context():
                losses.append(step(model, iterator)[1])
        samples = [per_call * (i + 1) for i in range(len(losses))]
        val = problem.evaluate(model, batch_size)
        bad = next((i + 1 for i, loss in enumerate(losses) if not math.isfinite(loss)), None)
        own_runs.append({"seed": seed, "loss": window_mean(samples, losses, per_call * calls),
                         "val_loss": val.get("loss"), "val_metric": val.get("metric"),
                         "nonfinite_step": bad})  # fmt: skip
        if bad is not None:
            break
    return own_runs


class References:
    """The FP32 references of one problem.

    Args:
        problem: The model and data.
        work_dir: Where the cache files live (``None``: memory only).
        keep: Called with ``(model, iterator)`` after fresh runs of the user's own
            training: a traced FP32 model of it is all that the timing needs, and a
            second trace would cost seconds.
    """

    def __init__(
        self,
        problem: Problem,
        work_dir: str | os.PathLike[str] | None = None,
        keep: Callable[[Any, Any], None] | None = None,
    ) -> None:
        self.problem = problem
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self._keep = keep
        self._cache: dict[tuple[int, str, bool, int, tuple[int, ...]], Reference] = {}
        self._initial: dict[str, Any] | None = None

    def path(self, policy: Policy, calls: int, seeds: Sequence[int]) -> Path | None:
        """The cache file of one reference (``None`` without a work folder, or for a
        model whose fingerprint could not be taken: nothing would notice its edits)."""
        if self.work_dir is None or not self.problem.spec.fingerprint:
            return None
        xla = "_xla" if policy.jit_compile else ""
        name = f"reference_{self.problem.spec.fingerprint}_bs{policy.batch_size}"
        which = "-".join(str(seed) for seed in seeds)
        return self.work_dir / f"{name}_{policy.lr_rule}{xla}_{calls}_seeds{which}.json"

    def get(self, policy: Policy, budget: Budget, seeds: Sequence[int] | None = None) -> Reference:
        """FP32 runs under ``policy``'s batch size, LR rule and XLA setting, for the
        budget's samples, one per data-order seed in ``seeds`` (default 1 to
        ``budget.ref_seeds``: the noise); cached.

        The user's own training is :meth:`Problem.baseline()
        <precsearch.engine.problem.Problem.baseline>`: its runs are the noise every trial
        is judged against.
        """
        policy, calls, seeds = self._normal(policy, budget, seeds)
        key = (policy.batch_size, policy.lr_rule, policy.jit_compile, calls, seeds)
        cached = self._cache.get(key)
        path = self.path(policy, calls, seeds)
        if cached is None and path is not None and path.exists():
            cached = Reference.from_dict(json.loads(path.read_text()))
        if cached is not None:
            self._cache[key] = cached
            return cached
        return self.keep(policy, budget, self._run(policy, calls, seeds))

    def calls(self, policy: Policy, budget: Budget) -> int:
        """The calls of an FP32 run under ``policy`` for the budget's samples."""
        per_call = (policy.batch_size or self.problem.batch_size) * self.problem.steps_per_execution
        return budget.calls(per_call, self.problem.batch_size, timed=False)

    def keep(self, policy: Policy, budget: Budget, ref: Reference) -> Reference:
        """Cache ``ref`` as the FP32 runs under ``policy`` for the budget's samples with
        its seeds: made here, or an FP32 candidate's own training, which is its twin."""
        policy, calls, seeds = self._normal(policy, budget, ref.seeds)
        ref = dataclasses.replace(ref, lr_rule=policy.lr_rule)
        self._cache[(policy.batch_size, policy.lr_rule, policy.jit_compile, calls, seeds)] = ref
        path = self.path(policy, calls, seeds)
        if path is not None:
            write_text_atomic(path, json.dumps(ref.to_dict()))
        return ref

    def _normal(
        self, policy: Policy, budget: Budget, seeds: Sequence[int] | None
    ) -> tuple[Policy, int, tuple[int, ...]]:
        """The normal form of a reference's policy, its calls and its seeds."""
        policy = self.problem.normalise(policy)
        if policy.batch_size == self.problem.batch_size:
            policy = dataclasses.replace(policy, lr_rule="none")  # every rule is a no-op
        seeds = tuple(seeds) if seeds is not None else noise_seeds(budget)
        return policy, self.calls(policy, budget), seeds

    def _run(self, policy: Policy, calls: int, seeds: tuple[int, ...]) -> Reference:
        problem = self.problem
        batch_size = policy.batch_size
        t0 = time.perf_counter()
        curves, val_loss, val_metric, metric_name = [], [], [], None
        model = problem.model_for(policy, seed=0)
        optimizer_state = [v.numpy() for v in model.optimizer.variables]
        if self._initial is None:  # the same initial weights under every policy
            self._initial = problem.evaluate(model, problem.batch_size)
        iterator = None
        for i, seed in enumerate(seeds):
            if i:
                problem.restore(model, optimizer_state)
            iterator = problem.iterator(batch_size, seed=seed)
            losses = []
            for _ in range(calls):
                losses.append(step(model, iterator)[1])
                if not math.isfinite(losses[-1]):
                    break
            curves.append(losses)
            val = problem.evaluate(model, batch_size)
            val_loss.append(val.get("loss"))
            val_metric.append(val.get("metric"))
            metric_name = val.get("metric_name", metric_name)
        if policy == problem.baseline() and self._keep is not None:
            self._keep(model, iterator)
        if any(not math.isfinite(c[-1]) for c in curves):
            warnings.warn(
                f"{problem.spec.source}: an FP32 reference run at batch size {batch_size} "
                "reached a non-finite loss; fidelity against it means little",
                stacklevel=3,
            )
        return Reference(
            batch_size=batch_size,
            lr_rule=policy.lr_rule,
            jit_compile=policy.jit_compile,
            steps=calls,
            samples_per_call=batch_size * problem.steps_per_execution,
            curves=curves,
            val_loss=val_loss,
            val_metric=val_metric,
            metric_name=metric_name,
            seconds=time.perf_counter() - t0,
            seeds=list(seeds),
            initial={k: v for k, v in self._initial.items() if k in ("loss", "metric")},
        )
