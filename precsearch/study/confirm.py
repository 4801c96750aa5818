"""The confirmation: choose the answer by a test on re-measured figures, then repeat it.

Nothing is called best on the search's figures alone (a trial's speedup comes from a few
blocks, and the search keeps its maximum: a winner's curse), nor reported on the rounds
it was chosen on (the same curse, once more). After the trials, :func:`confirm`:

1. **selects**: the top feasible Pareto trials (and the global recipe, if it trained
   like FP32) are timed round by round in one worker
   (:func:`precsearch.engine.measure.measure`), interleaved with the user's FP32
   training and a second, identical FP32 model (an A/A test: the instrument's own
   error, here and now). Every figure is a per-round paired ratio to FP32 (geometric
   mean, bootstrap interval: :mod:`precsearch.stats`). A candidate wins only if its
   lower confidence bound, Bonferroni-corrected for the number of candidates, clears 1
   against both FP32 models (so by more than whatever makes them read apart:
   :func:`bounds`); of those, the fastest (:func:`choose`). Rounds are added until
   every candidate is decided (it wins, or its upper bound falls under 1) or measured
   to ±3%, within a time cap; each round's order is random from the study's seed and
   recorded.
2. **judges the peers**: the global recipe by its trial; TensorFlow's graph rewrite
   (:mod:`precsearch.engine.peers`) by a trial of its own. A peer that did not train like
   FP32 is reported infeasible with its reason, never as a ratio.
3. **repeats and reports** on fresh rounds: FP32, the copy, the winner, the winner's FP32
   twin (FP32 at its batch size and XLA setting, so that the speedup splits into what
   precision adds and what the batch size and XLA add) and the feasible peers. The
   winner must repeat (its one-sided 95% lower bound above 1 against both copies), or the
   answer is FP32 and the verdict says which candidate failed to repeat. A winner whose
   precision part is confidently below 1 gives way to its FP32 twin when the twin trains
   like FP32 (:func:`report`).

The record is a :class:`~precsearch.records.Confirmation`, stored in the study.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from precsearch.errors import TrialFailed
from precsearch.policy import Policy
from precsearch.records import GRAPH_REWRITE, PEERS, Budget, Confirmation, Measurement
from precsearch.stats import (
    CONFIDENCE,
    HALF_WIDTH,
    figures_text,
    half_width,
    instrument_percent,
    ratio_figures,
)
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
    ALPHA,
    bounds,
    choose,
    instrument_error,
    measure_rounds,
)

__all__ = ["confirm", "report", "twin_of"]


def _precision_words(policy: Policy) -> str:
    low = sorted(d.removeprefix("mixed_") for d in policy.rule_dtypes() if d != "float32")
    return " and ".join(low) or "float32"


def _config_words(policy: Policy, base: Policy) -> str:
    parts = []
    if policy.batch_size != base.batch_size:
        parts.append(f"batch {policy.batch_size}")
    if policy.jit_compile != base.jit_compile:
        parts.append("XLA" if policy.jit_compile else "no XLA")
    return " with ".join(parts)


def twin_of(policy: Policy) -> Policy:
    """FP32 at ``policy``'s batch size, LR rule and XLA setting."""
    return dataclasses.replace(policy, default="float32", types={}, layers={}, manifest={})


def _percent(ratio: float) -> str:
    return f"{abs(ratio - 1) * 100:.0f}%"


def report(
    measured: Measurement,
    winner: Policy | None,
    base: Policy,
    peers: dict[str, dict[str, Any]],
    twin_feasible: bool = False,
) -> tuple[dict[str, Any], str]:
    """The answer's figures from the fresh rounds and the verdict's sentence.

    Args:
        measured: Fresh rounds of ``fp32``, ``null``, and as measured ``best`` (the
            winner), ``best_fp32`` (its FP32 twin), ``global``, ``graph_rewrite``.
        winner: The selection's winner (``None``: FP32 is the answer).
        base: The user's own training (FP32).
        peers: The peers' records, filled in here with their ratios.
        twin_feasible: Whether the winner's FP32 twin trains like FP32.

    Returns:
        ``(best, verdict)``; ``best["answer"]`` is ``"fp32"``, ``"winner"`` or
        ``"twin"`` (the winner's precision part did not clear 1 plus the instrument's
        error: it costs time, or adds nothing the instrument can see), and
        ``best["repeated"]`` whether the winner repeated on these rounds.
    """
    fp32 = measured.rates["fp32"]
    error = instrument_error(measured)
    null = ratio_figures(measured.rates["null"], fp32)
    for name, peer in peers.items():
        if name in measured.rates:
            peer["vs_fp32"] = ratio_figures(measured.rates[name], fp32)
    instrument = f"instrument error ±{instrument_percent(null):.1f}%"
    # What a change from the user's training must clear to earn its place: 1 plus the
    # instrument's own error in these rounds (the simpler policy wins ties).
    margin = 1 + instrument_percent(null) / 100
    best: dict[str, Any] = {"answer": "fp32", "instrument_error": error, "repeated": None}
    verdict = ""
    if winner is not None:
        vs = ratio_figures(measured.rates["best"], fp32)
        best["repeated"] = bounds(measured, "best", ALPHA)[0] > margin
        if not best["repeated"]:
            verdict = (
                f"the winner of the selection, {_precision_words(winner)}"
                f"{' at ' + _config_words(winner, base) if _config_words(winner, base) else ''}"
                f", did not repeat on fresh rounds beyond the instrument's "
                f"±{instrument_percent(null):.1f}% ({figures_text(vs)}); "
            )
        else:
            best.update(answer="winner", speedup_vs_fp32=vs, batch_size=winner.batch_size,
                        jit_compile=winner.jit_compile)  # fmt: skip
    if best["answer"] == "winner":
        verdict = _decompose(measured, winner, base, best, twin_feasible, margin)
        verdict += f"; a copy of FP32 measures {figures_text(null)} ({instrument})"
    else:
        # The answer is the user's own training: no ratio to quote (the copy's figures
        # are the instrument's error, in ``null_vs_fp32``, not FP32's speed over itself).
        best["speedup_vs_fp32"] = None
        verdict += f"your FP32 training is the answer ({instrument}): nothing confirmed faster"
    return best, verdict + _peers_text(peers)


def _decompose(
    measured: Measurement,
    winner: Policy,
    base: Policy,
    best: dict[str, Any],
    twin_feasible: bool,
    margin: float,
) -> str:
    """A repeated winner's verdict: its speed as precision times batch size and XLA,
    or its FP32 twin where the precision part does not clear ``margin`` (1 plus the
    instrument's error: a part that adds nothing the instrument can see is left out);
    ``best`` is filled in with the parts."""
    config, low = _config_words(winner, base), _precision_words(winner)
    vs = best["speedup_vs_fp32"]
    fp32 = measured.rates["fp32"]
    if "best_fp32" in measured.rates:
        precision = ratio_figures(measured.rates["best"], measured.rates["best_fp32"])
        twin = ratio_figures(measured.rates["best_fp32"], fp32)
        best["precision"], best["config"] = precision, twin
        if precision["low"] <= margin and twin_feasible:
            best.update(answer="twin", speedup_vs_fp32=twin, replaced=vs)
            verdict = f"FP32 at {config}: {figures_text(twin)} FP32; {low} there " + (
                f"costs {_percent(precision['estimate'])} ({figures_text(precision)}), so it "
                "is left out"
                if precision["high"] < 1
                else f"adds {figures_text(precision)}, within the instrument's "
                f"±{(margin - 1) * 100:.1f}%: left out"
            )
        else:
            verdict = f"{figures_text(vs)} FP32 = {precision['estimate']:.2f}x from {low}"
            verdict += f" x {twin['estimate']:.2f}x from {config}"
    elif low == "float32":
        best["config"] = vs
        verdict = f"{figures_text(vs)} FP32, all from {config} (no low precision)"
    else:
        best["precision"] = vs
        verdict = f"{figures_text(vs)} FP32, all from {low}"
    if "global" in measured.rates:
        best["speedup_vs_global_mixed"] = ratio_figures(
            measured.rates["best_fp32" if best["answer"] == "twin" else "best"],
            measured.rates["global"],
        )
    return verdict


def _peers_text(peers: dict[str, dict[str, Any]]) -> str:
    """``; global mixed recipe 0.80x (...) of FP32; TensorFlow's graph rewrite ...``."""
    text = ""
    for name, peer in peers.items():
        label = PEERS[name][0]
        if peer.get("vs_fp32"):
            text += f"; {label} {figures_text(peer['vs_fp32'])} of FP32"
        else:
            text += f"; {label} {peer['status']}" + (
                f" ({peer['reason']})" if peer.get("reason") else ""
            )
    return text


def _peer_records(study: Any, executor: Any, budget: Budget) -> dict[str, dict[str, Any]]:
    peers: dict[str, dict[str, Any]] = {}
    for name, (_, label) in PEERS.items():
        trial = baseline_trial(study, label) if label else None
        if trial is None:
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
        peer = {"status": "not available", "reason": "TensorFlow did not rewrite it here"}
    elif result.status == "failed":
        peer = {"status": "not measured", "reason": result.reason}
    peer["fidelity_gap"] = result.fidelity_gap
    peers[GRAPH_REWRITE] = peer
    return peers


def _twin(study: Any, winner_trial: Any) -> tuple[Any | None, bool]:
    """The winner's FP32 twin trial (or ``None``), and whether the twin trains like FP32:
    by its own trial, else by the FP32 run the winner's trial was compared with."""
    twin = twin_of(stored_policy(winner_trial))
    for trial in measured_trials(study):
        if stored_policy(trial) == twin:
            return trial, is_feasible(trial)
    result = result_of(winner_trial)
    return None, bool(result) and result.twin.get("status") == "ok"


def _time_to_quality(trial: Any, speedup: dict[str, Any]) -> dict[str, Any]:
    """The answer's wall time to FP32's quality against FP32's, on the confirmed speed:
    its trial's samples to the quality target over FP32's, times the confirmed ratio."""
    result = result_of(trial)
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
    study: Any, base: Policy, winner_trial: Any | None, peers: dict[str, dict[str, Any]]
) -> tuple[list[tuple[str, Policy | None]], Any | None, bool]:
    """What the fresh rounds time: FP32 and its copy, the winner and its FP32 twin, the
    peers that train like FP32; and the twin's trial and whether it trains like FP32."""
    configs: list[tuple[str, Policy | None]] = [("fp32", base), ("null", base)]
    twin_trial, twin_feasible = None, False
    if winner_trial is not None:
        winner = stored_policy(winner_trial)
        configs.append(("best", winner))
        at_users_setting = (winner.batch_size, winner.jit_compile) == (
            base.batch_size, base.jit_compile)  # fmt: skip
        if _precision_words(winner) != "float32" and not at_users_setting:
            configs.append(("best_fp32", twin_of(winner)))
            twin_trial, twin_feasible = _twin(study, winner_trial)
    for name in ("global", "global_except_pinned"):
        if peers.get(name, {}).get("status") == "feasible":
            configs.append((name, stored_policy(study.trials[peers[name]["trial"]])))
    if peers[GRAPH_REWRITE]["status"] == "feasible":
        configs.append((GRAPH_REWRITE, None))
    return configs, twin_trial, twin_feasible


def _precise(m: Measurement) -> bool:
    """Whether the fresh rounds read the copy and the winner to within the half width."""
    shown = [label for label in ("null", "best") if label in m.rates]
    return all(half_width(ratio_figures(m.rates[x], m.rates["fp32"])) <= HALF_WIDTH for x in shown)


def _settle(
    best: dict[str, Any], base: Policy, fp32: Any, winner_trial: Any | None, twin_trial: Any | None
) -> tuple[Policy, Any | None]:
    """The answer's policy and trial by ``best["answer"]``; ``best`` gets the answer's
    time to FP32's quality, or the winner that did not repeat."""
    winner = stored_policy(winner_trial) if winner_trial is not None else None
    answer = {"fp32": base, "winner": winner, "twin": winner and twin_of(winner)}[best["answer"]]
    best_trial = {"fp32": fp32, "winner": winner_trial, "twin": twin_trial}[best["answer"]]
    if winner_trial is not None and best["answer"] == "fp32":
        best["not_repeated"] = {"trial": winner_trial.number}
    if best_trial is not None and best["answer"] != "fp32":
        best["time_to_quality"] = _time_to_quality(best_trial, best["speedup_vs_fp32"])
    return answer, best_trial


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
    selection = measure_rounds(
        executor, configs, rng, block, seconds, lambda m: choose(m, labels).decided, clock
    )
    spent["selection"] = time.perf_counter() - start
    chosen_by = choose(selection, labels)
    candidates = [
        {**entry, "trial": by_label[entry["label"]].number} for entry in chosen_by.candidates
    ]

    start = time.perf_counter()
    peers = _peer_records(study, executor, budget)
    spent["peers"] = time.perf_counter() - start
    winner_trial = by_label[chosen_by.winner] if chosen_by.winner else None
    winner = stored_policy(winner_trial) if winner_trial else None
    configs, twin_trial, twin_feasible = _fresh_configs(study, base, winner_trial, peers)

    start = time.perf_counter()
    fresh = measure_rounds(executor, configs, rng, block, seconds, _precise, clock)
    spent["fresh"] = time.perf_counter() - start
    best, verdict = report(fresh, winner, base, peers, twin_feasible)
    answer, best_trial = _settle(best, base, fp32, winner_trial, twin_trial)
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
