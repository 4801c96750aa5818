"""Text for people: the Pareto table and where a run's time went."""

from __future__ import annotations

from typing import Any

from precsearch.policy.layers import LayerRecord
from precsearch.records import TrialResult
from precsearch.stats import figures_text
from precsearch.stored import (
    answered_without_training,
    baseline_of,
    confirmation_of,
    is_repeat,
    model_layers,
    result_of,
    status_of,
    study_record,
)

__all__ = [
    "assignments_summary",
    "pareto_rows",
    "pareto_table",
    "serving_text",
    "summarize_policy",
    "ttq_text",
    "outside_trials",
    "SPEED_LEGEND",
    "trials_text",
    "time_split",
    "time_summary",
]

SHORT = {"float32": "fp32", "mixed_bfloat16": "bf16", "mixed_float16": "fp16"}


def summarize_policy(policy: dict[str, Any], outputs: list[str] | None = None) -> str:
    """A policy's dtypes in a few words: ``bf16: Conv2D, Dense; fp32: rest``, and with
    ``outputs`` (the model's output layer ids) the ones that stay float32 because no
    layer rule names them: ``bf16: Dense; fp32: rest (output logits: fp32)``."""
    by_dtype: dict[str, list[str]] = {}
    for name, dtype in {**policy.get("types", {}), **policy.get("layers", {})}.items():
        by_dtype.setdefault(SHORT.get(dtype, dtype), []).append(name)
    default = SHORT.get(policy.get("default", "float32"), "?")
    parts = []
    for dtype, names in sorted(by_dtype.items()):
        if dtype == default:
            continue
        shown = ", ".join(names[:4]) + (f" +{len(names) - 4}" if len(names) > 4 else "")
        parts.append(f"{dtype}: {shown}")
    kept = [o for o in outputs or [] if o not in policy.get("layers", {})]
    parts.append(f"{default}: rest" + (f" (output {', '.join(kept)}: fp32)" if kept else ""))
    return "; ".join(parts)


def pareto_rows(study: Any) -> list[dict[str, Any]]:
    """The feasible Pareto front, fastest first, as dicts."""
    outputs = [layer["id"] for layer in model_layers(study) if layer.get("output")]
    rows = []
    for trial in study.best_trials:
        if is_repeat(trial):
            continue
        result = result_of(trial)
        policy = result.policy if result else {}
        blocks = result.block_ratios if result else {}
        rows.append(
            {
                "trial": trial.number,
                "speedup": trial.values[0],
                "low": blocks.get("low"),
                "high": blocks.get("high"),
                "gap": trial.values[1],
                "time_to_quality": ttq_text(result.time_to_quality if result else None),
                "batch_size": policy.get("batch_size"),
                "jit": policy.get("jit_compile"),
                "policy": summarize_policy(policy, outputs),
                "baseline": baseline_of(trial),
            }
        )
    return sorted(rows, key=lambda row: -row["speedup"])


def pareto_table(study: Any) -> str:
    """The feasible Pareto front as a text table (or a sentence when it is empty).

    Speedup is samples/s against the user's FP32 training, from the trial's block pairs
    (its 95% interval beside it); time to quality is the wall time to the loss every
    FP32 run reached, FP32's over the trial's. With a confirmation, the selection
    rounds' figures (estimate and 95% interval) stand beside the search's.
    """
    rows = pareto_rows(study)
    if not rows:
        return "No feasible trial yet: nothing trained like FP32 within the tolerance."
    record = confirmation_of(study)
    confirmed = {entry["trial"]: entry for entry in record.candidates} if record else {}
    best = record.best_trial if record else None
    header = f"{'trial':>5}  {'speedup':>7}  {'95% interval':>14}  {'to FP32 quality':>24}  "
    header += f"{'gap':>6}  "
    if confirmed:
        header += f"{'confirmed vs FP32':>20}  "
    lines = [header + f"{'batch':>5}  {'xla':>3}  policy"]
    for row in rows:
        spread = f"{row['low']:.2f}-{row['high']:.2f}" if row["low"] is not None else "-"
        label = f" [{row['baseline']}]" if row["baseline"] else ""
        label += " <- best" if row["trial"] == best else ""
        ttq = row["time_to_quality"]
        line = f"{row['trial']:>5}  {row['speedup']:>6.2f}x  {spread:>14}  {ttq:>24}  "
        line += f"{row['gap']:>6.2f}  "
        if confirmed:
            entry = confirmed.get(row["trial"], {})
            line += f"{figures_text(entry.get('speedup_vs_fp32')):>20}  "
        jit = "on" if row["jit"] else "off"
        lines.append(line + f"{row['batch_size']!s:>5}  {jit:>3}  {row['policy']}{label}")
    return "\n".join(lines)


def ttq_text(ttq: dict[str, Any] | None) -> str:
    """A time to quality in a few characters: ``1.32x``, ``>1.5x budget`` (not reached
    within 1.5 budgets) or ``n/a`` (not measured); with the candidate's tracing time
    beside it where it was measured (``1.32x, trace 4.1 s``: a user's run pays it once,
    the ratio leaves it out)."""
    ttq = ttq or {}
    if ttq.get("speedup"):
        text = f"{ttq['speedup']:.2f}x"
    elif str(ttq.get("outcome", "")).startswith("not reached"):
        text = ">1.5x budget"
    else:
        return "n/a"
    return text + (f", trace {ttq['trace_s']:.1f} s" if ttq.get("trace_s") else "")


def assignments_summary(policy: Any, layers: list[dict[str, Any]]) -> list[str]:
    """Per-class lines of which dtype a policy gives each layer, from model info alone.

    E.g. ``Conv2D (35 layers): bf16 33, fp32 2``; a class holding the output layer says
    so: ``Dense (3 layers): bf16 2, fp32 1 (output logits: fp32)``. Layers inside another
    layer take its dtype, as :meth:`~precsearch.policy.Policy.apply` gives it. No
    TensorFlow is needed.
    """
    counts: dict[str, dict[str, int]] = {}
    outputs: dict[str, list[str]] = {}
    records = [LayerRecord.from_json(layer) for layer in layers]
    for layer, record, (dtype, _) in zip(layers, records, policy.decide(records), strict=True):
        if layer["container"] or not layer["floating"]:
            continue
        per = counts.setdefault(layer["class"], {})
        per[SHORT[dtype]] = per.get(SHORT[dtype], 0) + 1
        if record.is_output:
            outputs.setdefault(layer["class"], []).append(f"{layer['id']}: {SHORT[dtype]}")
    lines = []
    for cls, per in sorted(counts.items(), key=lambda item: -sum(item[1].values())):
        total = sum(per.values())
        parts = ", ".join(f"{dtype} {n}" for dtype, n in sorted(per.items()))
        out = f" (output {', '.join(outputs[cls])})" if cls in outputs else ""
        lines.append(f"{cls} ({total} layer{'s' if total > 1 else ''}): {parts}{out}")
    return lines


PHASES = (
    ("worker start", ("worker_start",)),
    ("framework import", ("import",)),  # TensorFlow, JAX or PyTorch: Keras's backend
    ("model set-up", ("setup",)),
    ("FP32 references", ("reference",)),
    ("build + compile", ("build",)),
    ("tracing", ("trace",)),
    ("warm-up", ("warmup",)),
    ("measured blocks", ("measured",)),
    ("training on", ("train",)),
    ("evaluation", ("evaluate",)),
    ("runs on its own seeds", ("own_seeds",)),  # the quality test's (engine/references)
)


def serving_text(serving: dict[str, Any]) -> str | None:
    """One line on the exported SavedModel's signature: what a TF Serving client sends
    and gets back (``ModelInfo.serving``); None where the study did not record it."""
    outputs = serving.get("outputs") or {}
    if not outputs:
        return None
    signature = f"SavedModel signature {serving.get('signature')!r}"
    if not serving.get("inputs"):  # a subclassed model: Keras names them
        kinds = ", ".join(outputs.values())
        return f"{signature}: inputs and outputs as Keras names them; the output holds {kinds}"
    held = "; ".join(f"{name}: {kind}" for name, kind in outputs.items())
    return f"{signature}: inputs {', '.join(serving['inputs'])}; outputs {held}"


def time_split(results: list[TrialResult]) -> tuple[dict[str, float], float, float]:
    """Seconds per phase summed over trials, the trials' total, and the overhead share.

    Phases are keyed as in ``TrialResult.timings`` (``worker_start``, ``import``...), in
    the order of ``PHASES``. Overhead is everything but the measured blocks and the rest
    of the training.
    """
    phases = {k: sum(r.timings.get(k, 0.0) for r in results) for _, keys in PHASES for k in keys}
    trial_total = sum(r.timings.get("total", 0.0) for r in results)
    useful = phases["measured"] + phases["train"]
    share = 1 - useful / trial_total if trial_total else 0.0
    return phases, trial_total, share


def time_summary(results: list[TrialResult], seconds: float) -> str:
    """Where a run's wall time went, and the share that was overhead.

    Overhead is everything but the measured blocks and the rest of the training.
    """
    phases, trial_total, share = time_split(results)
    totals = {label: sum(phases[k] for k in keys) for label, keys in PHASES}
    parts = [f"{label} {value:.0f} s" for label, value in totals.items() if value >= 0.5]
    return (
        f"{len(results)} trials ran in {seconds:.0f} s ({trial_total:.0f} s in trials): "
        + ", ".join(parts)
        + f". Overhead (all but measured blocks and training): {share:.0%}."
    )


OUTSIDE = (
    ("selection", "the selection's rounds"),
    ("peers", "the graph rewrite's trial"),
    ("fresh", "the fresh rounds"),
    ("export", "training and exporting the answer"),
)  # the confirmation's phases (precsearch.records.Confirmation.seconds)


def outside_trials(study: Any) -> str:
    """Where a study's time outside its trials went: the probes (measured once per
    study) and each phase of the confirmation ("" when there is neither)."""
    probes = (study_record(study, "probes") or {}).get("seconds")
    record = confirmation_of(study)
    spent = record.seconds if record else {}
    parts = [f"the probes {probes:.0f} s"] if probes else []
    parts += [f"{words} {spent[name]:.0f} s" for name, words in OUTSIDE if name in spent]
    return f"Outside the trials: {', '.join(parts)}." if parts else ""


# Where each speed figure comes from, said once beside every table of them.
SPEED_LEGEND = (
    "speedup: the trial's own timed blocks (a screening figure); confirmed: the selection "
    "rounds; the answer: fresh rounds after the choice."
)


def trials_text(study: Any) -> str:
    """``12 trials (9 ok, 3 too_slow); 2 repeats of a measured policy, not run again``:
    a sampler's repeat is stored with the earlier figures but is not a trial, and nor is
    a trial enqueued (a baseline, an FP32 twin) that no worker ran before the study
    stopped: it is said apart, ``1 enqueued, not run``, as is a proposal the probes or the
    pins answered without training (as the run's own notes count them)."""
    counts: dict[str, int] = {}
    repeats = waiting = answered = 0
    for trial in study.get_trials(deepcopy=False):
        if is_repeat(trial):
            repeats += 1
        elif answered_without_training(trial):
            answered += 1
        elif trial.state.name == "WAITING":
            waiting += 1
        else:
            state = status_of(trial)
            counts[state] = counts.get(state, 0) + 1
    said = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    text = f"{sum(counts.values())} trials" + (f" ({said})" if said else "")
    plural = "s" if repeats > 1 else ""
    again = f"; {repeats} repeat{plural} of a measured policy, not run again" if repeats else ""
    queued = f"; {waiting} enqueued, not run" if waiting else ""
    plural = "s" if answered > 1 else ""
    ruled = f"; {answered} proposal{plural} answered without training" if answered else ""
    return text + again + ruled + queued
