"""The confirmation's verdict: the answer's figures from the fresh rounds, in words.

The winner is the answer only if it repeats: its one-sided lower bound at ``1 - ALPHA``
over FP32 on these rounds of new instances above 1, the between-instance spread in the
interval. Its speed splits into what low precision adds and what the batch size and XLA
add (its FP32 twin measured beside it); the precision part stays only where its lower
bound clears the instrument's own error in those rounds (what the A/A copy reads against
FP32), else the FP32 twin is the answer and the verdict says what was left out and why.
The peers (the global recipe, without the pinned groups too, and TensorFlow's graph
rewrite) are said beside it.
"""

from __future__ import annotations

from typing import Any

from precsearch.policy import Policy
from precsearch.records import PEERS, Measurement
from precsearch.stats import figures_text, instrument_percent, ratio_figures
from precsearch.study.selection import ALPHA, bounds, figures, instrument_error, spread_of

__all__ = ["config_words", "precision_words", "report"]


def precision_words(policy: Policy) -> str:
    low = sorted(d.removeprefix("mixed_") for d in policy.rule_dtypes() if d != "float32")
    return " and ".join(low) or "float32"


def config_words(policy: Policy, base: Policy) -> str:
    parts = []
    if policy.batch_size != base.batch_size:
        parts.append(f"batch {policy.batch_size}")
    if policy.jit_compile != base.jit_compile:
        parts.append("XLA" if policy.jit_compile else "no XLA")
    return " with ".join(parts)


def _percent(ratio: float) -> str:
    return f"{abs(ratio - 1) * 100:.0f}%"


def report(
    measured: Measurement,
    winner: Policy | None,
    base: Policy,
    peers: dict[str, dict[str, Any]],
    twin_feasible: bool = False,
    undecided_after: float | None = None,
    spread: tuple[float, int] | None = None,
) -> tuple[dict[str, Any], str]:
    """The answer's figures from the fresh rounds and the verdict's sentence.

    Args:
        measured: Fresh rounds of ``fp32``, ``null``, and as measured ``best`` (the
            winner), ``best_fp32`` (its FP32 twin), ``global``, ``graph_rewrite``.
        winner: The selection's winner (``None``: FP32 is the answer).
        base: The user's own training (FP32).
        peers: The peers' records, filled in here with their ratios.
        twin_feasible: Whether the winner's FP32 twin trains like FP32.
        undecided_after: The selection's time cap where it ended undecided with no
            winner: FP32 stays the answer, but nothing was shown slower either.
        spread: The between-instance variance and its degrees of freedom
            (:func:`~precsearch.study.selection.spread_of`; default: from ``measured``).

    Returns:
        ``(best, verdict)``; ``best["answer"]`` is ``"fp32"``, ``"winner"`` or
        ``"twin"`` (the winner's precision part did not clear 1 plus the instrument's
        error: it costs time, or adds nothing the instrument can see), and
        ``best["repeated"]`` whether the winner repeated on these rounds.
    """
    spread = spread_of(measured) if spread is None else spread
    error = instrument_error(measured)
    null = ratio_figures(measured.rates["null"], measured.rates["fp32"])
    for name, peer in peers.items():
        if name in measured.rates:
            peer["vs_fp32"] = figures(measured, name, spread=spread)
    instrument = f"instrument error ±{instrument_percent(null):.1f}%"
    # What a precision part must clear to earn its place beside its FP32 twin: what two
    # identical FP32 models read apart in these rounds (the A/A copy's own ratio, ≥ 1;
    # identical instances read 2-4% apart on CPUs). The simpler policy wins ties.
    margin = error
    best: dict[str, Any] = {"answer": "fp32", "instrument_error": error, "repeated": None}
    verdict = ""
    if winner is not None:
        vs = figures(measured, "best", spread=spread)
        # The repeat's test, the one that bounds false winners at ALPHA: new instances,
        # their spread in the interval (so no A/A margin on top: that counted it twice).
        lower = bounds(measured, "best", ALPHA, spread)[0]
        best["repeated"] = lower > 1
        if not best["repeated"]:
            verdict = (
                f"the winner of the selection, {precision_words(winner)}"
                f"{' at ' + config_words(winner, base) if config_words(winner, base) else ''}"
                f", did not repeat on fresh rounds of new instances ({figures_text(vs)}; "
                f"one-sided {1 - ALPHA:.0%} lower bound {lower:.2f}x, not above 1); "
            )
        else:
            best.update(answer="winner", speedup_vs_fp32=vs, batch_size=winner.batch_size,
                        jit_compile=winner.jit_compile)  # fmt: skip
    if best["answer"] == "winner":
        verdict = _decompose(measured, winner, base, best, twin_feasible, margin, spread)
        verdict += f"; a copy of FP32 measures {figures_text(null)} ({instrument})"
    else:
        # The answer is the user's own training: no ratio to quote (the copy's figures
        # are the instrument's error, in ``null_vs_fp32``, not FP32's speed over itself).
        best["speedup_vs_fp32"] = None
        if undecided_after is not None and winner is None:
            verdict += (
                f"your FP32 training stays the answer ({instrument}): the selection was "
                f"undecided within {undecided_after:.0f} s of rounds; more --confirm-time "
                "would decide"
            )
        else:
            verdict += f"your FP32 training is the answer ({instrument}): nothing confirmed faster"
    return best, verdict + _peers_text(peers)


def _decompose(
    measured: Measurement,
    winner: Policy,
    base: Policy,
    best: dict[str, Any],
    twin_feasible: bool,
    margin: float,
    spread: tuple[float, int],
) -> str:
    """A repeated winner's verdict: its speed as precision times batch size and XLA,
    or its FP32 twin where the precision part's lower bound does not clear ``margin``
    (what two identical FP32 models read apart: a part that adds nothing the instrument
    can tell from its own error is left out);
    ``best`` is filled in with the parts."""
    config, low = config_words(winner, base), precision_words(winner)
    vs = best["speedup_vs_fp32"]
    if "best_fp32" in measured.rates:
        precision = figures(measured, "best", "best_fp32", spread)
        twin = figures(measured, "best_fp32", spread=spread)
        best["precision"], best["config"] = precision, twin
        if precision["low"] <= margin and twin_feasible:
            best.update(answer="twin", speedup_vs_fp32=twin, replaced=vs)
            verdict = f"FP32 at {config}: {figures_text(twin)} FP32; {low} there " + (
                f"costs {_percent(precision['estimate'])} ({figures_text(precision)}), so it "
                "is left out"
                if precision["high"] < 1
                else f"adds {figures_text(precision)}, not confidently beyond the "
                f"{margin:.2f}x two identical FP32 models read apart: left out"
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
        best["speedup_vs_global_mixed"] = figures(
            measured, "best_fp32" if best["answer"] == "twin" else "best", "global", spread
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
