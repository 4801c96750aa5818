"""The confirmation's verdict: the answer's figures from the fresh rounds, in words.

The winner is the answer only if it repeats: its one-sided lower bound at ``1 - ALPHA``
over FP32 on these rounds of new instances above 1, the between-instance spread in the
interval. Then each part it changes from the user's training (low precision, the batch
size, XLA: :data:`PARTS`) must earn its place: what the part adds, the others kept
(the policy over itself without that part, both measured beside it), must be
confidently above 1 by the repeat's own test, with the instrument's error (the spread of
identical instances) in its interval. A part that does not is left out, the weakest
first, where the simpler policy trains like FP32, and the rest are judged again without
it (every simpler policy is timed in the same rounds); the verdict says what was left
out and why. The peers (the global recipe, without the pinned groups too, and
TensorFlow's graph rewrite) are said beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from precsearch.policy import Policy
from precsearch.records import PARTS, PEERS, Measurement
from precsearch.stats import figures_text, instrument_percent, ratio_figures
from precsearch.study.selection import (
    ALPHA,
    bounds,
    figures,
    instance_part,
    instrument_error,
    spread_of,
)

__all__ = [
    "answer_words",
    "config_words",
    "parts_of",
    "precision_words",
    "report",
    "simpler_configs",
    "simpler_label",
    "without",
]


def precision_words(policy: Policy) -> str:
    low = sorted(d.removeprefix("mixed_") for d in policy.rule_dtypes() if d != "float32")
    return " and ".join(low) or "float32"


def config_words(policy: Policy, base: Policy) -> str:
    """``batch 128 with XLA``: the batch size and XLA parts ``policy`` changes."""
    changed = parts_of(policy, base)
    return " with ".join(_part_words(p, policy) for p in changed if p != "precision")


def answer_words(policy: Policy, base: Policy) -> str:
    """``bfloat16 at batch 128 with XLA``, ``FP32 with XLA``, ``bfloat16``."""
    low, config = precision_words(policy), config_words(policy, base)
    name = "FP32" if low == "float32" else low
    if not config:
        return name
    if config.startswith("batch"):
        return f"{name} at {config}"
    return f"{name} with XLA" if config == "XLA" else f"{name} without XLA"


def parts_of(policy: Policy, base: Policy) -> tuple[str, ...]:
    """The :data:`PARTS` ``policy`` changes from the user's training ``base``."""
    changed = {
        "precision": precision_words(policy) != "float32",
        "batch": policy.batch_size != base.batch_size,
        "xla": policy.jit_compile != base.jit_compile,
    }
    return tuple(part for part in PARTS if changed[part])


def without(policy: Policy, base: Policy, parts: Iterable[str]) -> Policy:
    """``policy`` with ``parts`` set back to the user's training: float32 everywhere
    (the loss-scale settings kept, as they do nothing then), ``base``'s batch size (the
    LR rule kept), ``base``'s XLA setting."""
    parts = set(parts)
    changes: dict[str, Any] = {"manifest": {}}
    if "precision" in parts:
        changes.update(default="float32", types={}, layers={})
    if "batch" in parts:
        changes["batch_size"] = base.batch_size
    if "xla" in parts:
        changes["jit_compile"] = base.jit_compile
    return dataclasses.replace(policy, **changes)


def simpler_label(removed: Iterable[str], parts: Iterable[str]) -> str:
    """The fresh rounds' label of the winner without ``removed`` (of its ``parts``):
    ``best``, ``best_without_precision``, ``best_without_batch_xla``; ``fp32`` when
    nothing is left."""
    removed = [part for part in PARTS if part in set(removed)]
    if set(removed) >= set(parts):
        return "fp32"
    return "best_without_" + "_".join(removed) if removed else "best"


def simpler_configs(winner: Policy, base: Policy) -> list[tuple[str, Policy]]:
    """Every simpler policy than ``winner`` between it and FP32 (some of its parts set
    back), labelled: what the fresh rounds time so that each part can be judged in the
    presence of any set of the others."""
    parts = parts_of(winner, base)
    configs = []
    for mask in range(1, 2 ** len(parts) - 1):
        removed = [part for i, part in enumerate(parts) if mask >> i & 1]
        configs.append((simpler_label(removed, parts), without(winner, base, removed)))
    return configs


def _percent(ratio: float) -> str:
    return f"{abs(ratio - 1) * 100:.0f}%"


def report(
    measured: Measurement,
    winner: Policy | None,
    base: Policy,
    peers: dict[str, dict[str, Any]],
    trains_like_fp32: Callable[[Policy], bool] = lambda policy: False,
    undecided_after: float | None = None,
    spread: tuple[float, int] | None = None,
) -> tuple[dict[str, Any], str]:
    """The answer's figures from the fresh rounds and the verdict's sentence.

    Args:
        measured: Fresh rounds of ``fp32``, ``null``, and as measured ``best`` (the
            winner), the simpler policies (:func:`simpler_configs`), ``global``,
            ``graph_rewrite``.
        winner: The selection's winner (``None``: FP32 is the answer).
        base: The user's own training (FP32).
        peers: The peers' records, filled in here with their ratios.
        trains_like_fp32: Whether a simpler policy than the winner trains like FP32
            (asked only of one that would be the answer, never of the user's training).
        undecided_after: The selection's time cap where it ended undecided with no
            winner: FP32 stays the answer, but nothing was shown slower either.
        spread: The between-instance variance and its degrees of freedom
            (:func:`~precsearch.study.selection.spread_of`; default: from ``measured``).

    Returns:
        ``(best, verdict)``; ``best["answer"]`` is ``"fp32"``, ``"winner"`` or
        ``"simpler"`` (some part of the winner did not clear the instrument's error and
        is left out: ``best["left_out"]`` by part, ``best["policy"]`` the answer),
        ``best["parts"]`` what each part kept adds, and ``best["repeated"]`` whether the
        winner repeated on these rounds.
    """
    spread = spread_of(measured) if spread is None else spread
    error = instrument_error(measured)
    null = ratio_figures(measured.rates["null"], measured.rates["fp32"])
    for name, peer in peers.items():
        if name in measured.rates:
            peer["vs_fp32"] = figures(measured, name, spread=spread)
    # The instrument's error and its instance part: how far an instance's own offset
    # moves it (what more rounds of the same instances cannot average away).
    instance = instance_part(spread)
    instrument = (
        f"instrument error ±{instrument_percent(null):.1f}%; an instance's own offset "
        f"{instance['sd_percent']:.1f}% sd"
    )
    best: dict[str, Any] = {"answer": "fp32", "instrument_error": error, "repeated": None,
                            "instances": instance}  # fmt: skip
    verdict = ""
    if winner is not None:
        vs = figures(measured, "best", spread=spread)
        # The repeat's test, the one that bounds false winners at ALPHA: new instances,
        # their spread in the interval (so no A/A margin on top: that counted it twice).
        lower = bounds(measured, "best", ALPHA, spread)[0]
        best["repeated"] = lower > 1
        if not best["repeated"]:
            config = config_words(winner, base)
            verdict = (
                f"the winner of the selection, {precision_words(winner)}"
                f"{' at ' + config if config else ''}"
                f", did not repeat on fresh rounds of new instances ({figures_text(vs)}; "
                f"one-sided {1 - ALPHA:.0%} lower bound {lower:.2f}x, not above 1); "
            )
        else:
            verdict = _earn_places(measured, winner, base, best, trains_like_fp32, spread)
    if best["answer"] != "fp32":
        verdict += f"; a copy of FP32 measures {figures_text(null)} ({instrument})"
        label = best.pop("label")
        if "global" in measured.rates:
            best["speedup_vs_global_mixed"] = figures(measured, label, "global", spread)
    else:
        # The answer is the user's own training: no ratio to quote (the copy's figures
        # are the instrument's error, in ``null_vs_fp32``, not FP32's speed over itself).
        best["speedup_vs_fp32"] = None
        best.pop("label", None)
        if undecided_after is not None and winner is None:
            verdict += (
                f"your FP32 training stays the answer ({instrument}): the selection was "
                f"undecided within {undecided_after:.0f} s of rounds; more --confirm-time "
                "would decide"
            )
        else:
            verdict += f"your FP32 training is the answer ({instrument})" + (
                "" if best["repeated"] else ": nothing confirmed faster"
            )
    return best, verdict + _peers_text(peers)


def _earn_places(
    measured: Measurement,
    winner: Policy,
    base: Policy,
    best: dict[str, Any],
    trains_like_fp32: Callable[[Policy], bool],
    spread: tuple[float, int],
) -> str:
    """A repeated winner's parts judged (see the module doc), ``best`` filled in with the
    answer, its parts and what was left out; the verdict's words for it.

    A part earns its place when what it adds (the policy over itself without that part)
    has its one-sided ``1 - ALPHA`` lower bound above 1, the between-instance spread in
    the interval: the winner's own repeat test, so a part that adds nothing stays about
    that often, and the instrument's error (identical instances read 2-4% apart on CPUs)
    is counted once, not again as a margin on top. The simpler policy wins ties: parts
    that do not earn their place are left out the weakest first, each time the others are
    judged again without it; one whose simpler policy does not train like FP32 stays.
    """
    parts = parts_of(winner, base)

    def _trains(simpler: Policy) -> bool:  # the user's own training does
        return simpler == base or trains_like_fp32(simpler)

    kept, left_out, held = list(parts), {}, {}
    adds: dict[str, dict[str, Any]] = {}
    while kept:
        removed = [part for part in parts if part not in kept]
        here = simpler_label(removed, parts)
        over = {part: simpler_label([*removed, part], parts) for part in kept}
        adds = {part: figures(measured, here, over[part], spread) for part in kept}
        lower = {part: bounds(measured, here, ALPHA, spread, over[part])[0] for part in kept}
        for part in kept:
            adds[part]["lower"] = lower[part]
        weak = sorted((p for p in kept if lower[p] <= 1), key=lower.get)
        going = next((p for p in weak if _trains(without(winner, base, [*removed, p]))), None)
        held = {p: adds[p] for p in weak if p != going}
        if going is None:
            break
        left_out[going] = adds[going]
        kept.remove(going)
    answer = without(winner, base, left_out)
    label = simpler_label(left_out, parts)
    best["parts"] = {part: adds[part] for part in kept}
    best["left_out"], best["label"] = left_out, label
    words = [_left_out_words(p, f, winner) for p, f in left_out.items()]
    words += [
        f"{_part_words(p, winner)} stays although it adds only {figures_text(f)}: "
        "without it the policy is not shown to train like FP32"
        for p, f in held.items()
    ]
    said = "; ".join(words)
    if not kept:
        return f"{said}; "  # the report says the user's training is the answer
    vs = figures(measured, label, spread=spread)
    best.update(speedup_vs_fp32=vs, batch_size=answer.batch_size, jit_compile=answer.jit_compile)
    if left_out:
        best.update(
            answer="simpler",
            policy=answer.to_dict(),
            replaced=figures(measured, "best", spread=spread),
        )
    else:
        best["answer"] = "winner"
    each = ", ".join(
        f"{_part_words(p, winner)} {figures_text(f)}" for p, f in best["parts"].items()
    )
    verdict = f"{answer_words(answer, base)}: {figures_text(vs)} FP32"
    verdict += f" (what each part adds, the others kept: {each})" if len(kept) > 1 else ""
    return verdict + (f"; {said}" if said else "")


def _part_words(part: str, winner: Policy) -> str:
    return {
        "precision": precision_words(winner),
        "batch": f"batch {winner.batch_size}",
        "xla": "XLA" if winner.jit_compile else "no XLA",
    }[part]


def _left_out_words(part: str, adds: dict[str, Any], winner: Policy) -> str:
    name = _part_words(part, winner)
    if adds["high"] < 1:
        return f"{name} costs {_percent(adds['estimate'])} ({figures_text(adds)}): left out"
    return (
        f"{name} adds {figures_text(adds)}, not confidently above 1 (one-sided "
        f"{1 - ALPHA:.0%} lower bound {adds['lower']:.2f}x, the spread of identical "
        "instances in it): left out"
    )


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
