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

Every step is one command to the executor, within a time cap.

A trial that trains worse than FP32 (its fidelity gap beyond the tolerance) or whose
dynamic loss scale collapses, its FP32 twin healthy, shows nothing on one batch: quality
needs the budget. :func:`pin_quality` bisects its low-precision groups for the one that
does it, each check a run of the trial's budget with only some groups low (the rest
float32): the first half of the candidates alone; if it trains worse, the culprit is in
it, else in the other half; down to one group, which must train worse alone to be
pinned. At most :data:`QUALITY_RUNS` runs a finding; each run's verdict is stored in the
study (``localized``), so that a resumed study, or a later trial with the same groups,
reuses it.

The pins go into the
study (``pins``, reused when it resumes): the objective answers any policy that puts a
pinned group in its dtype without a trial (:func:`precsearch.pins.pinned_reason`), and
the global recipe is enqueued again with the pinned groups float32 (``except_pinned_*``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from precsearch.cost_model import XLA, group_name, is_dtype_param
from precsearch.errors import TrialFailed, one_line
from precsearch.pins import breaks, pin_key, pin_lines
from precsearch.records import Budget, TrialResult
from precsearch.stored import enqueue_baseline, set_study_record, study_record

__all__ = [
    "LOCALIZE_SECONDS",
    "low_groups",
    "localize",
    "QUALITY_RUNS",
    "pin_failure",
    "pin_quality",
    "pin_untimed",
    "store_pins",
    "trains_worse",
]

LOCALIZE_SECONDS = 120.0  # the most one localization spends on its checks
QUALITY_RUNS = 3  # the most runs of a trial's budget one "trains worse" finding spends


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


def trains_worse(result: TrialResult) -> bool:
    """Whether a judged trial is infeasible for its quality, which one batch cannot show
    (it trains worse than FP32, or its dynamic loss scale collapsed), while its FP32
    twin at the same batch size and XLA setting, where it has one, trains like FP32."""
    twin_healthy = not result.twin or result.twin.get("status") == "ok"
    quality = result.reason.startswith(("trains worse than FP32", "loss scale collapsed"))
    return result.status == "infeasible" and quality and twin_healthy


def pin_quality(
    study: Any,
    executor: Any,
    space: Any,
    params: dict[str, Any],
    judged: TrialResult,
    budget: Budget,
    say: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """Localize why a trial with ``params`` trains worse than FP32 or lost its loss scale
    (``judged``, its result), on runs of ``budget`` (see the module doc), and store the
    pin; the new pins (empty where no single group trains worse alone within
    :data:`QUALITY_RUNS` runs, or where a run fails: the worker died, say, and a line
    says so). A pin's fields are :func:`localize`'s, its ``reason`` in words ("trains
    worse than FP32 in bfloat16: gap 3.1 units", "its loss scale collapses in float16
    (to 0.5)"), ``detail`` the run's own verdict, and two more: ``found`` (on how many
    runs) and ``loss_scale`` (the run's history, thinned).
    """
    low = low_groups(params)
    cache = dict(study_record(study, "localized") or {})
    runs = 0

    def check(members: list[str]) -> dict[str, Any] | None:
        nonlocal runs
        given = {**params, **{p: "float32" for p in low if p not in members}}
        key = ",".join(f"{k}={v}" for k, v in sorted(given.items()))
        if key not in cache:
            if runs >= QUALITY_RUNS:
                return None
            runs += 1
            # Judged, never stopped as too slow; timed no more than a trial must be (its
            # speed is not what a check asks).
            checking = replace(budget, stop_slow=False, max_blocks=1)
            ran = executor.run_trial(space.policy(given), checking)
            cache[key] = _verdict(ran)
            set_study_record(study, "localized", cache)  # a resumed study reuses it
        return cache[key]

    candidates = list(low)
    # One group low: the trial itself ran it alone.
    evidence = _verdict(judged) if len(candidates) == 1 else None
    try:
        while len(candidates) > 1:
            half = candidates[: len(candidates) // 2]
            seen = check(half)
            if seen is None:
                break
            worse = seen["status"] == "infeasible"
            candidates, evidence = (half, seen) if worse else (candidates[len(half) :], None)
        if len(candidates) == 1 and evidence is None:
            evidence = check(candidates)
    except TrialFailed as exc:
        say(f"note: a trial that trains worse could not be localized ({one_line(exc)})")
        return {}
    if len(candidates) > 1 or evidence is None or evidence["status"] != "infeasible":
        say(
            f"note: no single group found that trains worse alone within {runs} run"
            f"{'s' * (runs != 1)} of the budget ({judged.reason[:80]})"
        )
        return {}
    (param,) = candidates
    dtype = low[param]
    pin = {
        "param": param,
        "dtype": dtype,
        "layers": space.group_layers().get(param, []),
        "reason": _quality_words(evidence, dtype),
        "detail": evidence["reason"],
        "problem": "",
        "together_with": [],
        "found": f"on runs of the trial's budget ({runs} run{'s' * (runs != 1)} here)",
        "loss_scale": evidence.get("loss_scale") or [],
    }
    return store_pins(study, space, {pin_key(param, dtype): pin}, say)


def _verdict(result: TrialResult) -> dict[str, Any]:
    """What a run of the budget says about quality, as the study stores it: status,
    reason, fidelity gap, and the loss scale (its least and its history, thinned)."""
    scales = result.numerics.get("loss_scale") or []
    return {
        "status": result.status,
        "reason": result.reason,
        "gap": result.fidelity_gap,
        "min_loss_scale": result.numerics.get("min_loss_scale"),
        "loss_scale": scales[:: max(1, len(scales) // 32)],
    }


def _quality_words(verdict: dict[str, Any], dtype: str) -> str:
    """Why a group's runs fail in ``dtype``, short: the loss scale, or the gap."""
    scale = verdict.get("min_loss_scale")
    if scale is not None and scale < 1:
        return f"its loss scale collapses in {dtype} (to {scale:g})"
    if verdict.get("gap") is not None:
        return f"trains worse than FP32 in {dtype}: gap {verdict['gap']:.1f} units"
    return f"{verdict['reason']} in {dtype}"


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
