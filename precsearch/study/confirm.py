"""The confirmation: choose the answer by a test on re-measured figures, then repeat it.

Nothing is called best on the search's figures alone (a trial's speedup comes from a few
blocks, and the search keeps its maximum: a winner's curse), nor reported on the rounds
it was chosen on (the same curse, once more). After the trials, :func:`confirm`:

1. **selects**: the top feasible Pareto trials (and the global recipe, if it trained
   like FP32) are timed round by round in one worker
   (:func:`precsearch.engine.measure.measure`), interleaved with the user's FP32
   training and a second, identical FP32 model (an A/A test: the instrument's own
   error, here and now). Every configuration is two independently built instances
   (:func:`~precsearch.study.selection.instance_configs`; FP32's are its timing model
   and the copy). Every figure is a per-round paired ratio to FP32, each side's
   instances pooled (geometric mean, Student-t interval with the between-instance
   spread in it: :mod:`precsearch.stats`). The selection is a screen: a candidate passes
   only if its lower confidence bound, Bonferroni-corrected for the number of
   candidates, clears 1 at :data:`~precsearch.study.selection.SCREEN`
   (:func:`~precsearch.study.selection.bounds`); of those, the fastest
   (:func:`~precsearch.study.selection.choose`). Rounds are added, in at most three
   looks that share that level (:class:`~precsearch.study.selection.Sequential`), until
   every candidate is decided (it passes, or its upper bound falls under 1) or measured
   to ±3%, within a time cap; each round's order is random from the study's seed and
   recorded.
2. **judges the peers**: the global recipe by its trial; TensorFlow's graph rewrite
   (:mod:`precsearch.engine.peers`) by a trial of its own. A peer that did not train like
   FP32 is reported infeasible with its reason, never as a ratio.
3. **repeats and reports** on fresh rounds of new instances (FP32's timing model stays):
   FP32, a new copy, the winner, every simpler policy between the winner and FP32 (some
   of the parts it changes, low precision, batch size and XLA, set back to the user's:
   :func:`precsearch.study.verdict.simpler_configs`) and the feasible peers, until
   :func:`~precsearch.study.selection.settled`. The winner must repeat (its one-sided
   95% lower bound over FP32 above 1, the spread between instances of both stages in the
   interval: the test that bounds false winners), or the answer is FP32 and the verdict
   says which candidate failed to repeat. Then each part must earn its place by the same
   test, what it adds over the policy without it; one that does not is left out where
   the simpler policy trains like FP32 (by its trial, or a trial of its own run now:
   :class:`Quality`), and the verdict says so (:func:`precsearch.study.verdict.report`).
   A selection that ended undecided without a winner is said so, not as FP32 having won.

The record is a :class:`~precsearch.records.Confirmation`, stored in the study.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from precsearch.errors import TrialFailed
from precsearch.policy import Policy
from precsearch.records import GRAPH_REWRITE, PEERS, Budget, Confirmation
from precsearch.stats import CONFIDENCE, ratio_figures
from precsearch.stored import (
    baseline_trial,
    fp32_trial,
    is_feasible,
    is_repeat,
    measured_trials,
    reason_of,
    record_confirmation,
    result_of,
    status_of,
    stored_policy,
)
from precsearch.study.selection import (
    Sequential,
    instance_configs,
    measure_rounds,
    settled,
    spread_of,
)
from precsearch.study.verdict import report, simpler_configs, without

__all__ = ["Quality", "confirm"]


def _peer_records(study: Any, executor: Any, budget: Budget) -> dict[str, dict[str, Any]]:
    peers: dict[str, dict[str, Any]] = {}
    for name, (_, label) in PEERS.items():
        trial = baseline_trial(study, label) if label else None
        if trial is None:
            continue
        if trial.state.name == "WAITING":  # enqueued when --trials was already reached
            peers[name] = {"trial": trial.number, "status": "not run", "reason": "enqueued"}
            continue
        feasible = trial.state.name == "COMPLETE" and is_feasible(trial)
        slow = status_of(trial) == "too_slow"
        peers[name] = {
            "trial": trial.number,
            "status": "feasible" if feasible else "too slow" if slow else "infeasible",
            "reason": "" if feasible else reason_of(trial) or trial.state.name,
        }
    result = executor.run_trial(None, budget, peer=GRAPH_REWRITE)
    status = {"ok": "feasible", "too_slow": "too slow"}.get(result.status, "infeasible")
    peer = {"status": status, "reason": result.reason}
    if result.numerics.get("rewrite_applied") is False:
        reason = result.reason or "TensorFlow did not rewrite it here"
        peer = {"status": "not available", "reason": reason}
    elif result.status == "failed":
        peer = {"status": "not measured", "reason": result.reason}
    peer["fidelity_gap"] = result.fidelity_gap
    peers[GRAPH_REWRITE] = peer
    return peers


class Quality:
    """Whether a simpler policy than the winner trains like FP32, asked by the verdict of
    one that would be the answer: a measured trial of that
    policy that ran to its end says; else the winner's trial where it is the winner's FP32
    twin (judged beside it); else a trial of its own, run now on the trials' budget (not
    stopped for speed). Each answer is kept in :attr:`checked` (by the policy's JSON):
    ``trains_like_fp32``, ``by`` (what said so), the ``trial`` or ``result``."""

    def __init__(
        self, study: Any, executor: Any, budget: Budget, base: Policy, winner_trial: Any
    ) -> None:
        self.study, self.executor, self.base, self.winner_trial = (
            study, executor, base, winner_trial)  # fmt: skip
        self.budget = dataclasses.replace(budget, stop_slow=False)
        self.checked: dict[str, dict[str, Any]] = {}

    def __call__(self, policy: Policy) -> bool:
        key = _key(policy)
        if key not in self.checked:
            self.checked[key] = self._judge(policy)
        return self.checked[key]["trains_like_fp32"]

    def of(self, policy: Policy) -> dict[str, Any]:
        """What was found for ``policy`` (``{}``: never asked, or the user's training)."""
        return self.checked.get(_key(policy), {})

    def _judge(self, policy: Policy) -> dict[str, Any]:
        for trial in measured_trials(self.study):
            if stored_policy(trial) == policy and status_of(trial) in ("ok", "infeasible"):
                return {"trains_like_fp32": is_feasible(trial), "by": f"trial {trial.number}",
                        "trial": trial.number}  # fmt: skip
        winner = stored_policy(self.winner_trial)
        result = result_of(self.winner_trial)
        if policy == without(winner, self.base, ["precision"]) and result and result.twin:
            return {"trains_like_fp32": result.twin.get("status") == "ok",
                    "by": f"trial {self.winner_trial.number}'s FP32 twin",
                    "fidelity_gap": result.twin.get("fidelity_gap")}  # fmt: skip
        try:
            own = self.executor.run_trial(policy, self.budget)
        except TrialFailed as exc:  # the simpler policy stays unjudged: its part stays
            return {"trains_like_fp32": False, "by": "a trial of its own", "reason": str(exc)}
        return {"trains_like_fp32": own.status == "ok", "by": "a trial of its own",
                "result": own}  # fmt: skip


def _key(policy: Policy) -> str:
    return json.dumps(policy.to_dict(), sort_keys=True)


def _time_to_quality(result: Any, speedup: dict[str, Any]) -> dict[str, Any]:
    """The answer's wall time to FP32's quality against FP32's, on the confirmed speed:
    its trial's samples to the quality target over FP32's, times the confirmed ratio."""
    ttq = result.time_to_quality if result else {}
    out = {"outcome": ttq.get("outcome", "not measured"), "trace_s": ttq.get("trace_s")}
    if ttq.get("samples") and ttq.get("fp32_samples"):
        out["samples_ratio"] = ttq["fp32_samples"] / ttq["samples"]
        out["speedup"] = speedup["estimate"] * out["samples_ratio"]
    return out


def _candidates(study: Any, base: Policy, top: int) -> tuple[list[str], dict[str, Any]]:
    """The selection's candidates: the ``top`` fastest Pareto trials that are not FP32,
    and the global recipe where it trains like FP32; their labels and trials by label."""
    front = [t for t in study.best_trials if not is_repeat(t) and stored_policy(t) != base]
    chosen = sorted(front, key=lambda t: -t.values[0])[:top]
    glob = baseline_trial(study, "global_")
    if glob is not None and is_feasible(glob) and glob not in chosen:
        chosen.append(glob)  # the global recipe competes too, when it trains like FP32
    labels = [f"c{i}" for i in range(len(chosen))]
    return labels, dict(zip(labels, chosen, strict=True))


def _fresh_configs(
    base: Policy, winner: Policy | None, peers: dict[str, dict[str, Any]], study: Any
) -> list[tuple[str, Policy | None]]:
    """What the fresh rounds time: FP32 and its copy, the winner and every simpler policy
    between it and FP32, the peers that train like FP32."""
    configs: list[tuple[str, Policy | None]] = [("fp32", base), ("null", base)]
    if winner is not None:
        configs += [("best", winner), *simpler_configs(winner, base)]
    for name in ("global", "global_except_pinned"):
        if peers.get(name, {}).get("status") == "feasible":
            configs.append((name, stored_policy(study.trials[peers[name]["trial"]])))
    if peers[GRAPH_REWRITE]["status"] == "feasible":
        configs.append((GRAPH_REWRITE, None))
    return configs


def _settle(
    best: dict[str, Any], base: Policy, fp32: Any, winner_trial: Any | None, quality: Quality
) -> tuple[Policy, Any | None]:
    """The answer's policy and its trial (``None`` where a simpler answer has none) by
    ``best["answer"]``; ``best`` gets the answer's time to FP32's quality and how a
    simpler answer's quality was judged, or the winner that did not repeat."""
    if best["answer"] == "fp32":
        if winner_trial is not None and not best["repeated"]:
            best["not_repeated"] = {"trial": winner_trial.number}
        return base, fp32
    if best["answer"] == "winner":
        answer, trial = stored_policy(winner_trial), winner_trial
        result = result_of(trial)
    else:
        answer = Policy.from_dict(best["policy"])
        found = quality.of(answer)
        number = found.get("trial")
        trial = None if number is None else quality.study.trials[number]
        result = result_of(trial) if trial is not None else found.get("result")
        best["quality"] = {k: v for k, v in found.items() if k != "result"}
        if result is not None:
            best["quality"].update(fidelity_gap=result.fidelity_gap, status=result.status)
    best["time_to_quality"] = _time_to_quality(result, best["speedup_vs_fp32"])
    return answer, trial


def confirm(
    study: Any,
    executor: Any,
    budget: Budget,
    top: int = 3,
    seconds: float = 60.0,
    block: int = 10,
    seed: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Confirmation:
    """Select, judge the peers, repeat and report; store the record (see the module doc).

    Args:
        study: The Optuna study, its trials done.
        executor: Runs the rounds and the graph rewrite's trial.
        budget: The trials' budget (for the graph rewrite's trial).
        top: Pareto trials to select from (fastest first).
        seconds: Time cap of the selection's rounds and of the fresh rounds, each.
        block: Least calls per timed block.
        seed: Seeds the round orders (``None``: a fresh one, recorded).
        clock: Seconds, for the time cap.

    Raises:
        TrialFailed: The FP32 baseline trial did not complete, or the worker failed.
    """
    import numpy as np

    fp32 = fp32_trial(study)
    if fp32 is None:
        raise TrialFailed("no FP32 baseline", "the FP32 baseline trial did not complete")
    seed = int(np.random.SeedSequence(seed).entropy % 2**32) if seed is None else seed
    rng = np.random.default_rng(seed)
    base = stored_policy(fp32)
    labels, by_label = _candidates(study, base, top)
    configs = [("fp32", base), ("null", base)]
    configs += [(label, stored_policy(t)) for label, t in by_label.items()]
    spent, start = {}, time.perf_counter()
    sequential = Sequential(labels)
    configs = instance_configs(configs, "selection")
    selection = measure_rounds(executor, configs, rng, block, seconds, sequential, clock)
    spent["selection"] = time.perf_counter() - start
    chosen_by = sequential.selection
    assert chosen_by is not None  # measure_rounds asks after every call
    candidates = [
        {**entry, "trial": by_label[entry["label"]].number} for entry in chosen_by.candidates
    ]

    start = time.perf_counter()
    peers = _peer_records(study, executor, budget)
    spent["peers"] = time.perf_counter() - start
    winner_trial = by_label[chosen_by.winner] if chosen_by.winner else None
    winner = stored_policy(winner_trial) if winner_trial else None
    configs = _fresh_configs(base, winner, peers, study)

    start = time.perf_counter()
    configs = instance_configs(configs, "fresh")  # new instances: their offsets are new
    fresh = measure_rounds(executor, configs, rng, block, seconds, settled, clock)
    spent["fresh"] = time.perf_counter() - start
    undecided = None if chosen_by.decided else seconds
    spread = spread_of(selection, fresh)  # one instrument: both stages' instances
    quality = Quality(study, executor, budget, base, winner_trial)
    best, verdict = report(fresh, winner, base, peers, quality, undecided, spread)
    answer, best_trial = _settle(best, base, fp32, winner_trial, quality)
    record = Confirmation(
        rounds={"selection": len(selection.orders), "fresh": len(fresh.orders)},
        block=block,
        seed=seed,
        candidates=candidates,
        fp32_trial=fp32.number,
        bar=chosen_by.bar,
        best_trial=(best_trial or winner_trial).number,
        best_is_fp32=best["answer"] == "fp32",
        best_policy=answer.to_dict(),
        best=best,
        null_vs_fp32=ratio_figures(fresh.rates["null"], fresh.rates["fp32"]),
        peers=peers,
        fp32_samples_per_s=float(np.exp(np.mean(np.log(fresh.rates["fp32"])))),
        verdict=verdict,
        confidence=CONFIDENCE,
        measured={"selection": selection.to_dict(), "fresh": fresh.to_dict()},
        seconds=spent,
    )
    record_confirmation(study, record)
    return record
