"""FP32 reference runs: the band of FP32 training that candidates are judged against.

For a batch size and LR rule, the model is trained in FP32 from the initial weights once
per data-order seed (at least 3); the spread between seeds is the noise band of
:mod:`precsearch.objectives`. One traced model serves every seed (its weights and
optimizer state are restored between runs), and the runs are cached in memory and, with
a work folder, in a JSON file per model fingerprint, batch size, LR rule and step count,
written atomically so that other workers reading the folder never see half a file.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from precsearch.files import write_text_atomic
from precsearch.instrument import step
from precsearch.policy import Policy
from precsearch.problem import Problem
from precsearch.records import Budget, Reference

__all__ = ["References"]


class References:
    """The FP32 references of one problem.

    Args:
        problem: The model and data.
        work_dir: Where the cache files live (``None``: memory only).
        keep: Called with ``(batch_size, model, iterator)`` after fresh runs at the
            model's own batch size: a traced FP32 model there is all that the timing
            needs, and a second trace would cost seconds.
    """

    def __init__(
        self,
        problem: Problem,
        work_dir: str | os.PathLike[str] | None = None,
        keep: Callable[[int, Any, Any], None] | None = None,
    ) -> None:
        self.problem = problem
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self._keep = keep
        self._cache: dict[tuple[int, str, int], Reference] = {}

    def path(self, batch_size: int, lr_rule: str, steps: int) -> Path | None:
        """The cache file of one reference (``None`` without a work folder)."""
        if self.work_dir is None:
            return None
        fingerprint = self.problem.spec.fingerprint
        return self.work_dir / f"reference_{fingerprint}_bs{batch_size}_{lr_rule}_{steps}.json"

    def get(self, batch_size: int, lr_rule: str, budget: Budget) -> Reference:
        """The FP32 runs at ``batch_size`` and ``lr_rule`` for ``budget``; cached."""
        if batch_size == self.problem.batch_size:
            lr_rule = "none"  # every rule leaves the learning rate alone at the own size
        key = (batch_size, lr_rule, budget.steps)
        if key in self._cache:
            return self._cache[key]
        path = self.path(batch_size, lr_rule, budget.steps)
        if path is not None and path.exists():
            ref = Reference.from_dict(json.loads(path.read_text()))
            if len(ref.curves) >= budget.ref_seeds:
                self._cache[key] = ref
                return ref
        ref = self._run(batch_size, lr_rule, budget)
        self._cache[key] = ref
        if path is not None:
            write_text_atomic(path, json.dumps(ref.to_dict()))
        return ref

    def _run(self, batch_size: int, lr_rule: str, budget: Budget) -> Reference:
        problem = self.problem
        t0 = time.perf_counter()
        policy = Policy(batch_size=batch_size, lr_rule=lr_rule, base_batch_size=problem.batch_size)
        curves, val_loss, val_metric, metric_name = [], [], [], None
        model = problem.model_for(policy, seed=0)
        optimizer_state = [v.numpy() for v in model.optimizer.variables]
        iterator = None
        for seed in range(budget.ref_seeds):
            if seed:
                problem.restore(model, optimizer_state)
            iterator = iter(problem.dataset(batch_size, seed=seed))
            losses = []
            for _ in range(budget.steps):
                losses.append(step(model, iterator)[1])
                if not math.isfinite(losses[-1]):
                    break
            curves.append(losses)
            val = problem.evaluate(model, batch_size)
            val_loss.append(val.get("loss"))
            val_metric.append(val.get("metric"))
            metric_name = val.get("metric_name", metric_name)
        if batch_size == problem.batch_size and self._keep is not None:
            self._keep(batch_size, model, iterator)
        if any(not math.isfinite(c[-1]) for c in curves):
            warnings.warn(
                f"{problem.spec.source}: an FP32 reference run at batch size {batch_size} "
                "reached a non-finite loss; fidelity against it means little",
                stacklevel=3,
            )
        return Reference(
            batch_size=batch_size,
            lr_rule=lr_rule,
            steps=budget.steps,
            curves=curves,
            val_loss=val_loss,
            val_metric=val_metric,
            metric_name=metric_name,
            seconds=time.perf_counter() - t0,
        )
