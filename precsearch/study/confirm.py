"""The confirmation: choose the answer on re-measured figures, report it on fresh ones.

Nothing is called best on the search's figures alone (a trial's speedup comes from a few
blocks, and the search keeps its maximum: a winner's curse), nor reported on the rounds
it was chosen on (the same curse, once more). After the trials, :func:`confirm`:

1. **selects**: the top feasible Pareto trials (and the global recipe, if it trained
   like FP32) are timed round by round in one worker
   (:func:`precsearch.engine.measure.measure`), interleaved with the user's FP32
   training and a second, identical FP32 model, whose score against FP32 is the
   instrument's own error here. The answer is the fastest candidate whose median
   is above 1 and above every round of that copy (:func:`choose`); else it is FP32.
2. **judges the peers**: the global recipe by its trial; TensorFlow's graph rewrite
   (:mod:`precsearch.engine.peers`) by a trial of its own. A peer that did not train like FP32
   is reported infeasible with its reason, never as a ratio.
3. **reports**: fresh rounds of FP32, the copy, the answer, FP32 at the answer's batch
   size and XLA setting (so that the speedup splits into what precision adds and what
   the batch size and XLA add), and the feasible peers (:func:`report`).

The record is a :class:`~precsearch.records.Confirmation`, stored in the study.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from precsearch.errors import TrialFailed
from precsearch.policy import Policy
from precsearch.records import GRAPH_REWRITE, Budget, Confirmation, Measurement
from precsearch.stats import figures_text, median, spread
from precsearch.study.trials import (
    baseline_trial,
    fp32_trial,
    is_feasible,
    is_repeat,
    stored_policy,
)

__all__ = ["choose", "confirm", "ratio", "report"]


def ratio(measured: Measurement, a: str, b: str) -> dict[str, float]:
    """``{median, min, max, rounds}`` of ``a``'s samples/s over ``b``'s, round by round."""
    return spread([x / y for x, y in zip(measured.rates[a], measured.rates[b], strict=True)])


def choose(measured: Measurement, trials: list[int]) -> tuple[int | None, float, list[dict]]:
    """The selection rule: ``(winning trial or None, bar, candidates' figures)``.

    ``measured`` has ``fp32``, ``null`` and ``c0``... for ``trials`` in order.
    """
    candidates = [
        {
            "trial": trial,
            "samples_per_s": median(measured.rates[f"c{i}"]),
            "speedup_vs_fp32": ratio(measured, f"c{i}", "fp32"),
        }
        for i, trial in enumerate(trials)
    ]
    bar = max(1.0, ratio(measured, "null", "fp32")["max"])
    winners = [c for c in candidates if c["speedup_vs_fp32"]["median"] > bar]
    best = max(winners, key=lambda c: c["speedup_vs_fp32"]["median"], default=None)
    return (best["trial"] if best else None), bar, candidates


def _precision_words(policy: Policy) -> str:
    dtypes = {policy.default, *policy.types.values(), *policy.layers.values()}
    low = sorted(d.removeprefix("mixed_") for d in dtypes if d != "float32")
    return " and ".join(low) or "float32"


def _config_words(policy: Policy, base: Policy) -> str:
    parts = []
    if policy.batch_size != base.batch_size:
        parts.append(f"batch {policy.batch_size}")
    if policy.jit_compile != base.jit_compile:
        parts.append("XLA" if policy.jit_compile else "no XLA")
    return " with ".join(parts)


def report(
    measured: Measurement,
    winner: Policy | None,
    base: Policy,
    peers: dict[str, dict[str, Any]],
    ttq_samples: float | None,
) -> tuple[dict[str, Any], str]:
    """The answer's figures from the fresh rounds, and the verdict's sentence.

    Args:
        measured: Fresh rounds of ``fp32``, ``null``, and as measured ``best`` (the
            answer), ``best_fp32`` (FP32 at its batch size and XLA), ``global``,
            ``graph_rewrite``.
        winner: The answer's policy (``None``: FP32 is the answer).
        base: The user's own training (FP32).
        peers: The peers' records, filled in here with their ratios.
        ttq_samples: FP32's samples to its final loss over the answer's (from its trial).
    """
    null = ratio(measured, "null", "fp32")
    for name, peer in peers.items():
        if name in measured.rates:
            peer["vs_fp32"] = ratio(measured, name, "fp32")
    if winner is None:
        best: dict[str, Any] = {"speedup_vs_fp32": null, "time_to_quality": None}
        verdict = (
            f"FP32 as you train it is the answer: nothing confirmed faster (a copy of FP32 "
            f"measures {figures_text(null)} against it here)"
        )
    else:
        vs = ratio(measured, "best", "fp32")
        best = {"speedup_vs_fp32": vs, "batch_size": winner.batch_size}
        best["jit_compile"] = winner.jit_compile
        best["time_to_quality"] = vs["median"] * ttq_samples if ttq_samples else None
        verdict = f"{vs['median']:.2f}x FP32 ({vs['min']:.2f}-{vs['max']:.2f})"
        config = _config_words(winner, base)
        low = _precision_words(winner)
        if "best_fp32" in measured.rates:
            best["precision"] = ratio(measured, "best", "best_fp32")
            best["config"] = ratio(measured, "best_fp32", "fp32")
            verdict += f" = {best['precision']['median']:.2f}x from {low}"
            if config:
                verdict += f" x {best['config']['median']:.2f}x from {config}"
        elif low == "float32":
            best["config"] = vs
            verdict += f", all from {config} (no low precision)"
        else:
            best["precision"] = vs
            verdict += f", all from {low}"
        ttq = best["time_to_quality"]
        verdict += "; time to FP32's final loss " + (f"{ttq:.2f}x" if ttq else "not reached")
        verdict += f"; a copy of FP32 measures {figures_text(null)}"
    if "global" in measured.rates and winner is not None:
        best["speedup_vs_global_mixed"] = ratio(measured, "best", "global")
    for name, peer in peers.items():
        label = "global mixed recipe" if name == "global" else "TensorFlow's graph rewrite"
        if peer.get("vs_fp32"):
            verdict += f"; {label} {figures_text(peer['vs_fp32'])} of FP32"
        else:
            verdict += f"; {label} {peer['status']}" + (
                f" ({peer['reason']})" if peer.get("reason") else ""
            )
    return best, verdict


def _peer_records(study: Any, executor: Any, budget: Budget) -> dict[str, dict[str, Any]]:
    glob = baseline_trial(study, "global_")
    peers: dict[str, dict[str, Any]] = {}
    if glob is not None:
        feasible = glob.state.name == "COMPLETE" and is_feasible(glob)
        peers["global"] = {
            "trial": glob.number,
            "status": "feasible" if feasible else "infeasible",
            "reason": "" if feasible else glob.user_attrs.get("reason") or glob.state.name,
        }
    result = executor.run_trial(None, budget, peer=GRAPH_REWRITE)
    peer = {"status": "feasible" if result.feasible else "infeasible", "reason": result.reason}
    if result.numerics.get("rewrite_applied") is False:
        peer = {"status": "not available", "reason": "TensorFlow did not rewrite it here"}
    elif result.status == "failed":
        peer = {"status": "not measured", "reason": result.reason}
    peer["fidelity_gap"] = result.fidelity_gap
    peers[GRAPH_REWRITE] = peer
    return peers


def confirm(
    study: Any, executor: Any, budget: Budget, top: int = 3, rounds: int = 5, block: int = 10
) -> Confirmation:
    """Select, judge the peers, report; store the record (see the module doc).

    Raises:
        TrialFailed: The FP32 baseline trial did not complete, or the worker failed.
    """
    fp32 = fp32_trial(study)
    if fp32 is None:
        raise TrialFailed("no FP32 baseline", "the FP32 baseline trial did not complete")
    base = stored_policy(fp32)
    front = [t for t in study.best_trials if not is_repeat(t) and stored_policy(t) != base]
    chosen = sorted(front, key=lambda t: -t.values[0])[:top]
    glob = baseline_trial(study, "global_")
    if glob is not None and is_feasible(glob) and glob not in chosen:
        chosen.append(glob)  # the global recipe competes too, when it trains like FP32

    configs = [("fp32", base), ("null", base)]
    configs += [(f"c{i}", stored_policy(t)) for i, t in enumerate(chosen)]
    selection = executor.confirm(configs, rounds, block)
    winner_number, bar, candidates = choose(selection, [t.number for t in chosen])

    peers = _peer_records(study, executor, budget)
    configs = [("fp32", base), ("null", base)]
    winner = None
    ttq_samples = None
    if winner_number is not None:
        winner_trial = study.trials[winner_number]
        winner = stored_policy(winner_trial)
        configs.append(("best", winner))
        fp32_same = dataclasses.replace(winner, default="float32", types={}, layers={})
        same_config = (winner.batch_size, winner.jit_compile) == (base.batch_size, base.jit_compile)
        if _precision_words(winner) != "float32" and not same_config:
            configs.append(("best_fp32", fp32_same))
        ttq = (winner_trial.user_attrs.get("result") or {}).get("time_to_quality") or {}
        if ttq.get("samples") and ttq.get("fp32_samples"):
            ttq_samples = ttq["fp32_samples"] / ttq["samples"]
    if peers.get("global", {}).get("status") == "feasible":
        configs.append(("global", stored_policy(study.trials[peers["global"]["trial"]])))
    if peers[GRAPH_REWRITE]["status"] == "feasible":
        configs.append((GRAPH_REWRITE, None))
    fresh = executor.confirm(configs, rounds, block)
    best, verdict = report(fresh, winner, base, peers, ttq_samples)
    record = Confirmation(
        rounds=rounds,
        block=block,
        candidates=candidates,
        fp32_trial=fp32.number,
        bar=bar,
        best_trial=winner_number if winner_number is not None else fp32.number,
        best_is_fp32=winner is None,
        best=best,
        null_vs_fp32=ratio(fresh, "null", "fp32"),
        peers=peers,
        fp32_samples_per_s=median(fresh.rates["fp32"]),
        verdict=verdict,
    )
    study.set_user_attr("confirmation", record.to_dict())
    return record
