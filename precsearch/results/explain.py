"""Why each layer group got its dtype: what low precision did there, from the trials.

The search's trials differ in many choices at once, so no two of them isolate one
group. A log-linear fit does: each trial's log speedup (its own timed blocks, a
screening figure) against one column per (group, low dtype) and one per other
parameter value (batch size, XLA), by least squares. ``exp`` of a group's coefficient
is what putting that group in that dtype multiplies the speed by, with everything else
held; its 95% interval comes from the fit's standard errors (Student t on the residual
degrees of freedom). A coefficient the trials cannot separate (every trial set the
group the same way, or it always moved with another) is said to be so, not guessed.
Beside it: how many trials with the group in that dtype trained unlike FP32.

Reads the study's storage only (no TensorFlow).
"""

from __future__ import annotations

import math
from typing import Any

from precsearch.stored import measured_trials, status_of, study_record, trained_own_policy

__all__ = [
    "PROBE_LEGEND",
    "WHY_LEGEND",
    "answer_params",
    "group_effects",
    "probe_summary",
    "why_lines",
]

CONFIDENCE = 0.95
WHY_LEGEND = (
    "Why, per layer group (the answer's dtype, then what low precision did there: a "
    "log-linear fit over the search's trials, each timed by its own blocks, 95% interval)"
)

PINS_LEGEND = (
    "Kept float32 (a layer group that breaks the model in a low dtype, found by the search "
    "on one batch against FP32, or on runs of a trial's budget where it trains worse, and "
    "never proposed in that dtype again; XLA, kept off where it cannot run the model)"
)
PROBE_LEGEND = (
    "The probes (each layer group alone in low precision against FP32, before the "
    "search: speed with its 95% interval, numerics on one batch)"
)


def _design(trials: list[Any], params: dict[str, list[str]]) -> tuple[list[str], Any]:
    """The fit's column names and matrix: an intercept, each (dtype group, low dtype),
    each other parameter's values but its first."""
    import numpy as np

    columns = ["(intercept)"]
    for name, values in params.items():
        if name == "dtype" or name.startswith("dtype:"):
            columns += [f"{name}={v}" for v in values if v != "float32"]
        else:
            columns += [f"{name}={v}" for v in values[1:]]
    rows = []
    for trial in trials:
        chosen = {f"{k}={v}" for k, v in trial.params.items()}
        rows.append([1.0] + [float(c in chosen) for c in columns[1:]])
    return columns, np.array(rows)


def group_effects(study: Any) -> list[dict[str, Any]]:
    """For every dtype parameter and low dtype of the study's space: the speed factor
    (estimate and 95% interval, or ``None`` with why) and the trials that trained
    unlike FP32 with it. Empty when the space has no dtype parameter."""
    import numpy as np
    from scipy import stats

    space = (study_record(study, "space") or {}).get("params") or {}
    params = {name: list(values) for name, values in space.items()}
    groups = [name for name in params if name == "dtype" or name.startswith("dtype:")]
    if not groups:
        return []
    # Trials the probes answered without running measured nothing: left out. A too-slow
    # trial's figure is the watchdog's estimate: rougher, but leaving the slowest trials
    # out would flatter low precision.
    done = [
        t for t in measured_trials(study) if trained_own_policy(t) and set(params) <= {*t.params}
    ]
    timed = [t for t in done if t.values and t.values[0] > 0]
    out = []
    columns, x = _design(timed, params) if timed else ([], np.zeros((0, 1)))
    y = np.log([t.values[0] for t in timed]) if timed else np.zeros(0)
    if timed:
        pinv = np.linalg.pinv(x)
        beta = pinv @ y
        dof = len(timed) - np.linalg.matrix_rank(x)
        resid = y - x @ beta
        sigma2 = float(resid @ resid / dof) if dof > 0 else math.nan
        cov = sigma2 * (pinv @ pinv.T)
        t_crit = float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof)) if dof > 0 else math.nan
    for group in groups:
        for dtype in params[group]:
            if dtype == "float32":
                continue
            column = f"{group}={dtype}"
            with_it = [t for t in timed if str(t.params.get(group)) == dtype]
            judged = [t for t in done if str(t.params.get(group)) == dtype]
            unlike = sum(status_of(t) == "infeasible" for t in judged)
            effect: dict[str, Any] | None = None
            reason = ""
            if not with_it or len(with_it) == len(timed):
                reason = f"every timed trial had it in {'float32' if not with_it else dtype}"
            else:
                j = columns.index(column)
                unit = np.zeros(len(columns))
                unit[j] = 1.0
                if not np.allclose(unit @ pinv @ x, unit, atol=1e-6):
                    reason = "it always changed together with another choice"
                elif not dof > 0:
                    reason = "too few trials for the choices they vary"
                else:
                    se = math.sqrt(max(cov[j, j], 0.0))
                    effect = {
                        "estimate": math.exp(beta[j]),
                        "low": math.exp(beta[j] - t_crit * se),
                        "high": math.exp(beta[j] + t_crit * se),
                        "trials": len(timed),
                    }
            out.append(
                {
                    "param": group,
                    "group": group.removeprefix("dtype").removeprefix(":") or "every layer",
                    "dtype": dtype,
                    "effect": effect,
                    "why_not": reason,
                    "trials_with_it": len(judged),
                    "unlike_fp32": unlike,
                }
            )
    return out


def why_lines(
    effects: list[dict[str, Any]], chosen: dict[str, str], probes: dict[str, Any] | None = None
) -> list[str]:
    """One line per group: the chosen dtype, what low precision did there in the
    trials, and what the probes measured for the group alone.

    Args:
        effects: :func:`group_effects`.
        chosen: Dtype parameter to the value the answer has (``{}`` for FP32).
        probes: The study's probes (its ``probes`` record), if any.
    """
    from precsearch.cost_model import ruled_out
    from precsearch.stats import figures_text

    gone = ruled_out(probes)
    lines = []
    for e in effects:
        dtype = e["dtype"]
        got = chosen.get(e["param"], "float32")
        if e["effect"]:
            f = e["effect"]
            factor = f"{f['estimate']:.2f}x ({f['low']:.2f}-{f['high']:.2f})"
            if f["high"] < 1:
                word = "costs speed"
            elif f["low"] > 1:
                word = "saves time"
            else:
                word = "no clear speed change"
            speed = f"{dtype} there {factor} the speed with it float32: {word}"
        else:
            speed = f"{dtype} there: no estimate ({e['why_not']})"
        numerics = (
            f"; {e['unlike_fp32']} of {e['trials_with_it']} trials with it in {dtype} "
            "trained unlike FP32"
            if e["unlike_fp32"]
            else ""
        )
        entry = (probes or {}).get("probes", {}).get(f"{e['param']}={dtype}")
        probe = ""
        if entry:
            error = entry["numerics"].get("gradient_error")
            numbers = f"gradient {error:.1%} off FP32" if error is not None else "non-finite"
            probe = f"; the probe, {dtype} alone: {figures_text(entry['speed'])}, {numbers}"
            if dtype in gone.get(e["param"], []):
                probe += " (ruled out: confidently slower)"
        lines.append(f"{e['group']}: {got} — {speed}{numerics}{probe}")
    return lines


def answer_params(study: Any, record: Any) -> dict[str, str]:
    """The dtype parameters of a confirmed answer (``{}`` when it is FP32, at any batch
    size and XLA setting)."""
    if record is None or record.best_is_fp32 or "precision" in record.best.get("left_out", {}):
        return {}
    params = study.trials[record.best_trial].params
    return {k: str(v) for k, v in params.items() if k == "dtype" or k.startswith("dtype:")}


def pin_summary(study: Any) -> list[str]:
    """One line per pinned layer group: its layers and why it stays float32 (``[]`` for
    a study without pins)."""
    from precsearch.pins import pin_lines

    info = study_record(study, "model_info")
    return pin_lines(study_record(study, "pins"), info.integer_inputs if info else {})


def probe_summary(study: Any) -> list[str]:
    """The study's probes, one line each, and the cost model against the trials
    (``[]`` for a study without probes)."""
    from precsearch.cost_model import accuracy, probe_lines

    record = study_record(study, "probes")
    if not record:
        return []
    lines = [
        f"{len(record['probes'])} probes, {record['rounds']} timed rounds, "
        f"{record['seconds']:.0f} s before the search",
        *probe_lines(record),
    ]
    acc = accuracy(study)
    if acc:
        lines.append(
            f"cost model (the product of the probes' ratios) against {len(acc['trials'])} "
            f"trials in low precision at your batch size and XLA setting: within ±15% on "
            f"{acc['within_15']}, median error {acc['median_error']:.0%}, largest "
            f"{acc['max_error']:.0%}"
        )
    else:
        lines.append(
            "cost model: no trial in low precision at your batch size and XLA setting was "
            "timed to check it against"
        )
    return lines
