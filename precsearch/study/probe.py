"""Probes before the search: what each layer group alone in low precision does.

A search's trials change many groups at once; a probe changes one. For every dtype
parameter of the space (a layer class under ``--group-by type``, a block, a layer, or
the whole model) and every low dtype it offers, the probe policy is FP32 with that group
alone in that dtype (and, with several groups, one with all of them in it). Each is
measured in the model itself, at its own shapes, forward and backward, with the casts at
the group's boundaries included:

* **speed**: timed rounds interleaved with FP32 in one process (the confirmation's own
  measuring, :func:`precsearch.study.selection.measure_rounds`), until every figure is
  decided or precise (its 95% interval excludes 1 or is within ±5%) or the probe time
  is spent; a ratio per probe with its bootstrap interval;
* **numerics**: one batch against FP32 from the same weights
  (:func:`precsearch.engine.probe.numerics`): the loss's and the gradient's relative
  error, the largest activation against float16's limit.

Where the space offers XLA, one more probe times FP32 with the other XLA setting (XLA,
for a user who trains without it), in the same rounds: compiling is what made every XLA
trial of a MobileNetV3Small study on a 2-core CPU cost a trace and a compile to read
0.29-0.30x. It is ruled out like a dtype (confidently slower than FP32); its numerics
are not measured (XLA computes in the same dtypes).

What the search does with them (:func:`probe_study`), and what the user sees:

* a cost model: a policy's speed from precision is predicted as the product of its
  groups' probe ratios, corrected toward the all-groups probe by how many groups are
  low together (:func:`predicted`); the study reports it against what the trials
  measured (:func:`accuracy`);
* the predicted-best policy (every group whose probe is faster than FP32, in its
  fastest dtype, where its numerics were finite) is enqueued after the baselines;
* a dtype is *ruled out* for a group when the probe found that group alone in it
  confidently slower than FP32 (interval below 1) and, with several groups, all of
  them in it too: a trial that asks for it is answered ``too_slow`` from the probes
  without running (the global recipe still runs: it is the peer the answer is shown
  against);
* the explanation per group (:mod:`precsearch.results.explain`) quotes them.

The probes are stored in the study (``probes``) and reused when it resumes.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from precsearch.errors import TrialFailed, UserInputError, one_line
from precsearch.stats import figures_text, half_width, ratio_figures
from precsearch.study.selection import measure_rounds

__all__ = [
    "accuracy",
    "predicted",
    "predicted_best",
    "probe_lines",
    "probe_study",
    "rejection",
    "ruled_out",
    "run_probes",
]

ALL = "every group"
XLA = "jit_compile"  # the XLA dimension's parameter
HALF_WIDTH = 0.05  # a probe measured to within ±5% is precise enough to rank with


def _is_dtype(param: str) -> bool:
    return param == "dtype" or param.startswith("dtype:")


def probe_params(space: Any) -> list[tuple[str, str, str, dict[str, Any]]]:
    """``(label, param, dtype, params)`` per probe: each group alone in each low dtype
    it offers, and with several groups all of them (param ``ALL``); where the space
    offers XLA, FP32 with the other XLA setting (param ``XLA``, its value as ``dtype``)."""
    choices = space.choices()
    groups = [p for p in choices if _is_dtype(p)]
    recipes = dict(space.baselines())
    out = []
    for dtype in space.dtypes[1:]:
        # The global recipe's parameters carry the dtype's loss scale; the other groups
        # go back to float32.
        recipe = recipes[f"global_{dtype}"]
        fp32 = {**recipe, **{g: "float32" for g in groups}}
        own = [g for g in groups if dtype in [str(v) for v in choices[g]]]
        for group in own:
            out.append((f"{group}={dtype}", group, dtype, {**fp32, group: dtype}))
        if len(own) > 1:
            out.append((f"{ALL}={dtype}", ALL, dtype, {**fp32, **{g: dtype for g in own}}))
    users = recipes["fp32"]
    for value in choices.get(XLA, []):
        if XLA in users and bool(value) != bool(users[XLA]):
            out.append((f"{XLA}={value}", XLA, str(value), {**users, XLA: value}))
    return out


def run_probes(
    executor: Any, space: Any, seconds: float, block: int, seed: int = 0
) -> dict[str, Any]:
    """Measure the probes (see the module doc); the record the study stores."""
    t0 = time.perf_counter()
    fp32 = space.policy(dict(space.baselines())["fp32"])
    probes = probe_params(space)
    if not [p for p in probes if p[1] != XLA]:
        raise UserInputError(
            "nothing to probe: the space offers no low-precision dtype for any layer group "
            "(see --dtypes and --group-by)"
        )
    configs = [("fp32", fp32)] + [(label, space.policy(p)) for label, _, _, p in probes]

    def settled(m: Any) -> bool:
        for label, *_ in probes:
            f = ratio_figures(m.rates[label], m.rates["fp32"])
            if not (f["high"] < 1 or f["low"] > 1 or half_width(f) <= HALF_WIDTH):
                return False
        return True

    rng = np.random.default_rng(seed)
    measured = measure_rounds(executor, configs, rng, block, seconds, settled)
    numbers = executor.numerics(
        [(label, space.policy(p)) for label, param, _, p in probes if param != XLA]
    )
    entries = {}
    for label, param, dtype, params in probes:
        entries[label] = {
            "param": param,
            "dtype": dtype,
            "params": {k: str(v) for k, v in params.items()},
            "speed": ratio_figures(measured.rates[label], measured.rates["fp32"]),
            "numerics": numbers.get(label, {}),
        }
    return {
        "probes": entries,
        "rounds": len(measured.orders),
        "seconds": time.perf_counter() - t0,
    }


def _speed(record: dict[str, Any], param: str, dtype: str) -> dict[str, Any] | None:
    entry = record["probes"].get(f"{param}={dtype}")
    return entry["speed"] if entry else None


def ruled_out(record: dict[str, Any] | None) -> dict[str, list[str]]:
    """Per group, the dtypes the probes rule out (see the module doc)."""
    out: dict[str, list[str]] = {}
    for entry in (record or {}).get("probes", {}).values():
        param, dtype = entry["param"], entry["dtype"]
        if param == ALL or entry["speed"]["high"] >= 1:
            continue
        together = _speed(record, ALL, dtype)
        if together is None or together["high"] < 1:
            out.setdefault(param, []).append(dtype)
    return out


def rejection(record: dict[str, Any] | None, params: dict[str, Any]) -> str:
    """Why the probes answer a trial with ``params`` without running it ("" if not)."""
    out = ruled_out(record)
    for param, dtypes in out.items():
        dtype = str(params.get(param))
        if dtype in dtypes:
            alone = figures_text(_speed(record, param, dtype))
            return f"ruled out by the probes: {_who(param, dtype)} alone {alone} of FP32's speed"
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
        if _is_dtype(param) and str(value) != "float32":
            low.setdefault(str(value), []).append(param)
    factor = 1.0
    for dtype, groups in low.items():
        for param in groups:
            speed = _speed(record, param, dtype)
            if speed is None:
                return None
            factor *= speed["estimate"]
        together = _speed(record, ALL, dtype)
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
    for param in [p for p in space.choices() if _is_dtype(p)]:
        best, speed = "float32", 1.0
        for dtype in space.dtypes[1:]:
            entry = record["probes"].get(f"{param}={dtype}")
            finite = entry and entry["numerics"].get("gradient_error") is not None
            if finite and entry["speed"]["estimate"] > speed:
                best, speed = dtype, entry["speed"]["estimate"]
        if best != "float32":
            recipe = recipes[f"global_{best}"]
            params.update({k: v for k, v in recipe.items() if not _is_dtype(k)})
            params[param] = best
    xla = next((e for e in record["probes"].values() if e["param"] == XLA), None)
    if xla is not None and xla["speed"]["estimate"] > 1:
        params[XLA] = xla["dtype"] == "True"
    if params in [p for _, p in space.baselines()]:
        return None
    return params


def _group(param: str) -> str:
    return param.removeprefix("dtype").removeprefix(":") or "every layer"


def _who(param: str, dtype: str) -> str:
    """A probe in words: "Conv2D in bfloat16", "every group in bfloat16", "XLA"."""
    if param == XLA:
        return "XLA" if dtype == "True" else "no XLA"
    return f"{ALL if param == ALL else _group(param)} in {dtype}"


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
        who = _who(param, entry["dtype"])
        line = f"{who}: {figures_text(entry['speed'])} FP32's speed; {numbers}"
        if n.get("problem"):
            line += f"; {n['problem']}"
        if entry["dtype"] in out.get(param, []):
            line += "; ruled out"
        lines.append(line)
    return lines


def probe_study(
    study: Any, executor: Any, space: Any, options: Any, block: int, progress: Any
) -> tuple[dict[str, Any] | None, list[str]]:
    """The study's probes (stored ones on a resume, else measured now and stored), the
    predicted-best policy enqueued; ``(record, notes)``. A probe that fails leaves the
    search to run without them (a note says why)."""
    record = study.user_attrs.get("probes")
    notes: list[str] = []
    if record is None and options.probe_time > 0 and probe_params(space):
        try:
            record = run_probes(executor, space, options.probe_time, block, options.seed)
        except TrialFailed as exc:
            return None, [f"the probes failed ({one_line(exc)}): the search ran without them"]
        study.set_user_attr("probes", record)
        print(
            f"probes: {len(record['probes'])} in {record['rounds']} rounds, "
            f"{record['seconds']:.0f} s",
            file=progress,
            flush=True,
        )
        for line in probe_lines(record):
            print(f"  {line}", file=progress, flush=True)
    best = predicted_best(record, space)
    if best is not None and rejection(record, best) == "":
        study.enqueue_trial(best, user_attrs={"probe": "predicted best"}, skip_if_exists=True)
    gone = ruled_out(record)
    if gone:
        said = ", ".join(
            "XLA" if p == XLA else f"{_group(p)} {'/'.join(d)}" for p, d in gone.items()
        )
        notes.append(f"ruled out by the probes (no trial runs them): {said}")
    return record, notes


def accuracy(study: Any) -> dict[str, Any] | None:
    """The cost model against the trials: per trial that measured its own speed at the
    user's batch size and XLA setting, the probes' prediction and the measured
    speedup; the median error and how many were within ±15%. ``None`` without probes
    or such trials."""
    from precsearch.stored import finished

    record = study.user_attrs.get("probes")
    info = study.user_attrs.get("model_info") or {}
    if not record:
        return None
    own = (info.get("batch_size"), bool(info.get("jit_compile")))
    rows = []
    for trial in finished(study):
        result = trial.user_attrs.get("result") or {}
        figures = result.get("block_ratios") or {}
        policy = result.get("policy") or {}
        if not figures or (policy.get("batch_size"), bool(policy.get("jit_compile"))) != own:
            continue
        if all(str(v) == "float32" for k, v in trial.params.items() if _is_dtype(k)):
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
