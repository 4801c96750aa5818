"""The probes' record read back: the cost model, what it rules out, lines for people.

:mod:`precsearch.study.probe` measures the probes and stores their record in the study
(``probes``); everything that reads that record is here, below both the Optuna side
(the objective answers ruled-out policies, the predicted best is enqueued) and
:mod:`precsearch.results` (the explanation per group, the probes' summary):

* a cost model: a policy's speed from precision is predicted as the product of its
  groups' probe ratios, corrected toward the all-groups probe by how many groups are
  low together (:func:`predicted`), and checked against what the trials measured
  (:func:`accuracy`);
* the predicted-best policy (:func:`predicted_best`);
* a dtype is *ruled out* for a group when the probe found that group alone in it
  confidently slower than FP32 (interval below 1) and, with several groups, all of
  them in it too (:func:`ruled_out`, :func:`rejection`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from precsearch.stats import figures_text
from precsearch.stored import measured_trials, result_of, study_record

__all__ = [
    "ALL",
    "XLA",
    "accuracy",
    "group_name",
    "is_dtype_param",
    "predicted",
    "predicted_best",
    "probe_lines",
    "probe_name",
    "rejection",
    "ruled_out",
]

ALL = "every group"
XLA = "jit_compile"  # the XLA dimension's parameter


def is_dtype_param(param: str) -> bool:
    return param == "dtype" or param.startswith("dtype:")


def _probe_speed(record: dict[str, Any], param: str, dtype: str) -> dict[str, Any] | None:
    entry = record["probes"].get(f"{param}={dtype}")
    return entry["speed"] if entry else None


def ruled_out(record: dict[str, Any] | None) -> dict[str, list[str]]:
    """Per group, the dtypes the probes rule out (see the module doc)."""
    out: dict[str, list[str]] = {}
    for entry in (record or {}).get("probes", {}).values():
        param, dtype = entry["param"], entry["dtype"]
        if param == ALL or entry["speed"]["high"] >= 1:
            continue
        together = _probe_speed(record, ALL, dtype)
        if together is None or together["high"] < 1:
            out.setdefault(param, []).append(dtype)
    return out


def rejection(record: dict[str, Any] | None, params: dict[str, Any]) -> str:
    """Why the probes answer a trial with ``params`` without running it ("" if not)."""
    out = ruled_out(record)
    for param, dtypes in out.items():
        dtype = str(params.get(param))
        if dtype in dtypes:
            alone = figures_text(_probe_speed(record, param, dtype))
            return (
                f"ruled out by the probes: {probe_name(param, dtype)} alone {alone} of FP32's speed"
            )
    return ""


def predicted(record: dict[str, Any] | None, params: dict[str, Any]) -> float | None:
    """What precision multiplies the speed by at ``params`` (1 for FP32; ``None``
    without probes for a group it uses), times the XLA probe's ratio where ``params``
    take the XLA setting it measured.

    Per low dtype: the product of its groups' probe ratios, times the interaction the
    all-groups probe measured (its ratio over the product of every group's) spread
    evenly over the groups after the first: ``(all / product) ** ((k - 1) / (n - 1))``
    for ``k`` of ``n`` groups in that dtype. One group alone is its probe, all of them
    the all-groups probe; between, the casts two low groups no longer need between
    them are assumed alike for every pair (MobileNetV2's convolutions in bfloat16 were
    0.27x by the plain product, 0.35x measured).
    """
    if not record:
        return None
    low: dict[str, list[str]] = {}
    for param, value in params.items():
        if is_dtype_param(param) and str(value) != "float32":
            low.setdefault(str(value), []).append(param)
    factor = 1.0
    for dtype, groups in low.items():
        for param in groups:
            speed = _probe_speed(record, param, dtype)
            if speed is None:
                return None
            factor *= speed["estimate"]
        together = _probe_speed(record, ALL, dtype)
        every = [e for e in record["probes"].values() if e["dtype"] == dtype and e["param"] != ALL]
        if together is not None and len(every) > 1 and len(groups) > 1:
            product = math.prod(e["speed"]["estimate"] for e in every)
            share = (len(groups) - 1) / (len(every) - 1)
            factor *= (together["estimate"] / product) ** share
    xla = record["probes"].get(f"{XLA}={params.get(XLA)}")
    return factor * (xla["speed"]["estimate"] if xla else 1.0)


def predicted_best(record: dict[str, Any] | None, space: Any) -> dict[str, Any] | None:
    """The parameters the probes predict fastest (the user's batch size): each group in
    the low dtype whose probe is fastest and above 1, with finite numerics, and the
    other XLA setting where its probe is above 1. ``None`` when that is FP32 or a policy
    enqueued already."""
    if not record:
        return None
    params = dict(dict(space.baselines())["fp32"])
    recipes = dict(space.baselines())
    for param in [p for p in space.choices() if is_dtype_param(p)]:
        best, speed = "float32", 1.0
        for dtype in space.dtypes[1:]:
            entry = record["probes"].get(f"{param}={dtype}")
            finite = entry and entry["numerics"].get("gradient_error") is not None
            if finite and entry["speed"]["estimate"] > speed:
                best, speed = dtype, entry["speed"]["estimate"]
        if best != "float32":
            recipe = recipes[f"global_{best}"]
            params.update({k: v for k, v in recipe.items() if not is_dtype_param(k)})
            params[param] = best
    xla = next((e for e in record["probes"].values() if e["param"] == XLA), None)
    if xla is not None and xla["speed"]["estimate"] > 1:
        params[XLA] = xla["dtype"] == "True"
    if params in [p for _, p in space.baselines()]:
        return None
    return params


def group_name(param: str) -> str:
    return param.removeprefix("dtype").removeprefix(":") or "every layer"


def probe_name(param: str, dtype: str) -> str:
    """A probe in words: "Conv2D in bfloat16", "every group in bfloat16", "XLA"."""
    if param == XLA:
        return "XLA" if dtype == "True" else "no XLA"
    return f"{ALL if param == ALL else group_name(param)} in {dtype}"


def probe_lines(record: dict[str, Any] | None) -> list[str]:
    """One line per probe for people: speed, numerics, and whether it is ruled out."""
    if not record:
        return []
    out = ruled_out(record)
    lines = []
    for entry in record["probes"].values():
        n = entry["numerics"]
        param = entry["param"]
        error = n.get("gradient_error")
        numbers = (
            "the same dtypes as FP32"
            if param == XLA
            else f"gradient {error:.2%} off FP32, loss {n['loss_error']:.2%}"
            if error is not None and n.get("loss_error") is not None
            else "non-finite on one batch"
        )
        who = probe_name(param, entry["dtype"])
        line = f"{who}: {figures_text(entry['speed'])} FP32's speed; {numbers}"
        if n.get("problem"):
            line += f"; {n['problem']}"
        if entry["dtype"] in out.get(param, []):
            line += "; ruled out"
        lines.append(line)
    return lines


def accuracy(study: Any) -> dict[str, Any] | None:
    """The cost model against the trials: per trial that measured its own speed at the
    user's batch size and XLA setting, the probes' prediction and the measured
    speedup; the median error and how many were within ±15%. ``None`` without probes
    or such trials."""
    record = study_record(study, "probes")
    info = study_record(study, "model_info")
    if not record or info is None:
        return None
    users_setting = (info.batch_size, bool(info.jit_compile))
    rows = []
    for trial in measured_trials(study):
        result = result_of(trial)
        figures = result.block_ratios
        policy = result.policy
        setting = (policy.get("batch_size"), bool(policy.get("jit_compile")))
        if not figures or setting != users_setting:
            continue
        if all(str(v) == "float32" for k, v in trial.params.items() if is_dtype_param(k)):
            continue  # FP32 itself: predicted 1 whatever the probes say
        guess = predicted(record, trial.params)
        if guess is not None:
            rows.append(
                {"trial": trial.number, "predicted": guess, "measured": figures["estimate"]}
            )
    if not rows:
        return None
    errors = [abs(r["predicted"] / r["measured"] - 1) for r in rows]
    return {
        "trials": rows,
        "median_error": float(np.median(errors)),
        "within_15": sum(e <= 0.15 for e in errors),
        "max_error": max(errors) if errors else math.nan,
    }
