"""A layer group that breaks in low precision is a finding: found, pinned float32, the rest
searched.

An error, or a non-finite loss, in a trial (or a probe) whose low-precision groups the
user's FP32 training does not have, says something about those groups, not about the
user's model. Like Polygraphy's ``debug precision`` (which bisects a network's layers to
find those that must stay in higher precision), :func:`localize` narrows it down, on one
batch against FP32 (the probes' numerics, :func:`precsearch.engine.batch_numerics.
batch_numerics`: an error or a non-finite value shows on the first batch):

1. the failing policy as it is, beside FP32 at its batch size and XLA setting: if one
   batch is finite and error-free, there is nothing to pin (it broke later in training;
   the trial's own verdict stands), and if FP32 breaks too, it is not low precision's
   doing (the user's model or data);
2. each of its low-precision groups alone (one command for all): a group that breaks
   alone is pinned;
3. while the rest together still breaks, halves of it, down to the smallest half that
   still does: pinned together.

Every step is one command to the executor, within a time cap. The pins go into the
study (``pins``, reused when it resumes): the objective answers any policy that puts a
pinned group in its dtype without a trial (:func:`precsearch.pins.pinned_reason`), and
the global recipe is enqueued again with the pinned groups float32 (``except_pinned_*``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from precsearch.cost_model import XLA, group_name, is_dtype_param
from precsearch.pins import breaks, pin_key, pin_lines
from precsearch.stored import enqueue_baseline, set_study_record, study_record

__all__ = [
    "LOCALIZE_SECONDS",
    "low_groups",
    "localize",
    "pin_failure",
    "pin_untimed",
    "store_pins",
]

LOCALIZE_SECONDS = 120.0  # the most one localization spends on its checks


def low_groups(params: dict[str, Any]) -> dict[str, str]:
    """The dtype parameters ``params`` put in a low dtype, with that dtype."""
    return {p: str(v) for p, v in params.items() if is_dtype_param(p) and str(v) != "float32"}


def localize(
    executor: Any,
    space: Any,
    params: dict[str, Any],
    seconds: float = LOCALIZE_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, dict[str, Any]]:
    """The pins that make ``params`` finite and error-free on one batch (see the module
    doc): ``"<param>=<dtype>"`` to ``{param, dtype, layers, reason, detail, problem,
    together_with}``; empty when the policy does not break on one batch.

    Raises:
        TrialFailed: The executor failed (the worker died or hung).
    """
    low = low_groups(params)
    start = clock()
    layers = space.group_layers()

    def check(sets: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
        configs = [
            (label, space.policy({**params, **{p: "float32" for p in low if p not in members}}))
            for label, members in sets.items()
        ]
        return executor.numerics(configs)

    def pin(param: str, numbers: dict[str, Any], together: list[str]) -> dict[str, Any]:
        return {
            "param": param,
            "dtype": low[param],
            "layers": layers.get(param, []),
            "reason": breaks(numbers),
            "detail": str(numbers.get("detail", ""))[-1000:],
            "problem": numbers.get("problem", ""),
            "together_with": [p for p in together if p != param],
        }

    if not low:
        return {}
    first = check({"fp32": [], "all": list(low)})
    if breaks(first["fp32"]) or not breaks(first["all"]):
        return {}  # FP32 itself breaks the same way (the model's fault), or nothing does
    alone = check({p: [p] for p in low})
    pins = {pin_key(p, low[p]): pin(p, alone[p], []) for p in low if breaks(alone[p])}
    rest = [p for p in low if not breaks(alone[p])]
    while rest and clock() - start < seconds:
        together = check({"rest": rest})["rest"]
        if not breaks(together):
            break
        subset = rest
        while len(subset) > 1 and clock() - start < seconds:
            half = len(subset) // 2
            halves = check({"a": subset[:half], "b": subset[half:]})
            broken = [key for key in ("a", "b") if breaks(halves[key])]
            if not broken:
                break  # neither half breaks alone: the whole subset is the finding
            subset = subset[:half] if broken[0] == "a" else subset[half:]
            together = halves[broken[0]]
        pins.update({pin_key(p, low[p]): pin(p, together, subset) for p in subset})
        rest = [p for p in rest if p not in subset]
    return pins


def pin_failure(
    study: Any, executor: Any, space: Any, params: dict[str, Any], say: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """Localize why ``params`` broke, store the new pins in the study, say each in one
    line, and enqueue the global recipes with every pinned group float32; the new pins
    (empty when nothing breaks on one batch)."""
    return store_pins(study, space, localize(executor, space, params), say)


def pin_untimed(
    study: Any, space: Any, entry: dict[str, Any], say: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """Pin what a probe that could not be timed (``entry``, from the probes' ``broken``
    with its ``untimed`` reason) ran alone: XLA (kept off) or one group in its dtype;
    nothing for every group at once, whose groups each ran alone. The new pins."""
    param, dtype = entry["param"], entry["dtype"]
    if param != XLA and not is_dtype_param(param):
        return {}
    pin = {
        "param": param,
        "dtype": dtype,
        "layers": space.group_layers().get(param, []),
        "reason": entry["untimed"],
        "detail": "",
        "problem": "",
        "together_with": [],
    }
    return store_pins(study, space, {pin_key(param, dtype): pin}, say)


def store_pins(
    study: Any, space: Any, found: dict[str, dict[str, Any]], say: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """Store the pins of ``found`` the study does not hold yet, say each in one line, and
    enqueue the global recipes with every pinned group float32; the new pins."""
    stored = study_record(study, "pins") or {}
    new = {key: pin for key, pin in found.items() if key not in stored}
    if not new:
        return {}
    stored = {**stored, **new}
    set_study_record(study, "pins", stored)
    info = study_record(study, "model_info")
    for line in pin_lines(new, info.integer_inputs if info else {}):
        say(f"pinned: {line}")
    recipes = dict(space.baselines())
    for dtype in space.dtypes[1:]:
        recipe = dict(recipes[f"global_{dtype}"])
        kept = [p for p in low_groups(recipe) if pin_key(p, dtype) in stored]
        if kept and len(kept) < len(low_groups(recipe)):
            recipe.update({p: "float32" for p in kept})
            enqueue_baseline(study, recipe, f"except_pinned_{dtype}")
            say(
                f"enqueued: the global {dtype} recipe except "
                f"{', '.join(group_name(p) for p in kept)} (kept float32)"
            )
    return new
