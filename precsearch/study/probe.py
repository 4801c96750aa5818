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
  is spent; a ratio per probe with its Student-t interval (one instance each);
* **numerics**: one batch against FP32 from the same weights
  (:func:`precsearch.engine.batch_numerics.batch_numerics`): the loss's and the gradient's relative
  error, the largest activation against float16's limit, and the classic pitfalls of the
  group's layers in that dtype (an overflow, an exp, square or sum overflowing inside a
  layer, no kernel, far slower: ``pitfalls``, one line each, naming the layer; all of
  them in the record's ``pitfalls`` and the progress output).

Where the space offers XLA, one more probe times FP32 with the other XLA setting (XLA,
for a user who trains without it), in the same rounds: compiling is what made every XLA
trial of a MobileNetV3Small study on a 2-core CPU cost a trace and a compile to read
0.29-0.30x. It is ruled out like a dtype (confidently slower than FP32); its numerics
are not measured (XLA computes in the same dtypes).

What the search does with them (:func:`probe_study`), and what the user sees:

* a cost model (:mod:`precsearch.cost_model`, which reads the probes' record back): a
  policy's speed from precision is predicted as the product of its groups' probe
  ratios, corrected toward the all-groups probe by how many groups are low together;
  the study reports it against what the trials measured;
* the predicted-best policy (every group whose probe is faster than FP32, in its
  fastest dtype, where its numerics were finite) is enqueued after the baselines;
* a dtype is *ruled out* for a group when the probe found that group alone in it
  confidently slower than FP32 (interval below 1) and, with several groups, all of
  them in it too: a trial that asks for it is answered ``too_slow`` from the probes
  without running (the global recipe still runs: it is the peer the answer is shown
  against);
* a probe that breaks the model on one batch is localized like a trial and its group
  pinned float32; one that cannot be timed (XLA without a kernel for one of its ops on
  this machine) is a finding of its own, pinned as it ran (XLA off, or its group
  float32), and the other probes are timed without it;
* the explanation per group (:mod:`precsearch.results.explain`) quotes them.

The probes are stored in the study (``probes``) and reused when it resumes.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from precsearch.cost_model import (
    ALL,
    XLA,
    group_name,
    is_dtype_param,
    predicted_best,
    probe_lines,
    rejection,
    ruled_out,
)
from precsearch.errors import TrialFailed, UserInputError, one_line
from precsearch.pins import breaks
from precsearch.records import Measurement
from precsearch.stats import half_width, ratio_figures
from precsearch.stored import enqueue_predicted_best, set_study_record, study_record
from precsearch.study.pitfalls import pin_failure, pin_untimed
from precsearch.study.selection import measure_rounds

__all__ = ["probe_params", "probe_study", "run_probes"]

HALF_WIDTH = 0.05  # a probe measured to within ±5% is precise enough to rank with


def probe_params(space: Any) -> list[tuple[str, str, str, dict[str, Any]]]:
    """``(label, param, dtype, params)`` per probe: each group alone in each low dtype
    it offers, and with several groups all of them (param ``ALL``); where the space
    offers XLA, FP32 with the other XLA setting (param ``XLA``, its value as ``dtype``)."""
    choices = space.choices()
    groups = [p for p in choices if is_dtype_param(p)]
    recipes = dict(space.baselines())
    out = []
    for dtype in space.dtypes[1:]:
        # The global recipe's parameters carry the dtype's loss scale; the other groups
        # go back to float32.
        recipe = recipes[f"global_{dtype}"]
        fp32 = {**recipe, **{g: "float32" for g in groups}}
        offering = [g for g in groups if dtype in [str(v) for v in choices[g]]]
        for group in offering:
            out.append((f"{group}={dtype}", group, dtype, {**fp32, group: dtype}))
        if len(offering) > 1:
            out.append((f"{ALL}={dtype}", ALL, dtype, {**fp32, **{g: dtype for g in offering}}))
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
    # The numbers first: a probe that breaks the model on one batch is a finding (the
    # search pins its group float32), not something to time.
    numbers = executor.numerics(
        [(label, space.policy(p)) for label, param, _, p in probes if param != XLA]
    )

    def entry(label: str, param: str, dtype: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"param": param, "dtype": dtype, "params": {k: str(v) for k, v in params.items()},
                "numerics": numbers.get(label, {})}  # fmt: skip

    broken = {p[0]: entry(*p) for p in probes if p[0] in numbers and breaks(numbers[p[0]])}
    probes = [probe for probe in probes if probe[0] not in broken]
    rng = np.random.default_rng(seed)
    configs = [(label, space.policy(p)) for label, _, _, p in probes]
    measured, untimed = _timed_rounds(executor, fp32, configs, rng, block, seconds)
    entries = {}
    for probe in probes:
        label = probe[0]
        if label in untimed:
            # Its numbers on one batch, but no timed step: a finding of its own.
            broken[label] = {**entry(*probe), "untimed": untimed[label]}
        else:
            speed = ratio_figures(measured.rates[label], measured.rates["fp32"])
            entries[label] = {**entry(*probe), "speed": speed}
    said = [n.get("pitfalls") or [] for n in numbers.values()]
    return {
        "probes": entries,
        "broken": broken,
        "pitfalls": sorted({line for lines in said for line in lines}),
        "rounds": len(measured.orders) if measured else 0,
        "seconds": time.perf_counter() - t0,
    }


def _timed_rounds(
    executor: Any,
    fp32: Any,
    configs: list[tuple[str, Any]],
    rng: Any,
    block: int,
    seconds: float,
) -> tuple[Measurement | None, dict[str, str]]:
    """Timed rounds of ``configs`` beside FP32 until each is decided or precise, and the
    labels that could not be timed, with why (``None`` when nothing was left to time).

    One configuration that cannot be timed (XLA without a kernel for one of its ops)
    fails the whole command: the rounds then go on without the configurations that fail
    alone (:func:`_untimed`)."""
    labels = [label for label, _ in configs]
    start = time.monotonic()

    def settled(m: Measurement) -> bool:
        for label in labels:
            f = ratio_figures(m.rates[label], m.rates["fp32"])
            if not (f["high"] < 1 or f["low"] > 1 or half_width(f) <= HALF_WIDTH):
                return False
        return True

    if not configs:
        return None, {}
    try:
        return measure_rounds(executor, [("fp32", fp32), *configs], rng, block, seconds,
                              settled), {}  # fmt: skip
    except TrialFailed:
        untimed = _untimed(executor, fp32, configs, block)
        if not untimed:
            raise  # none fails alone: not a probe's finding
    labels = [label for label in labels if label not in untimed]
    left = [(label, policy) for label, policy in configs if label not in untimed]
    if not left:
        return None, untimed
    seconds = max(0.0, seconds - (time.monotonic() - start))
    return measure_rounds(executor, [("fp32", fp32), *left], rng, block, seconds, settled), untimed


def _untimed(
    executor: Any, fp32: Any, configs: list[tuple[str, Any]], block: int
) -> dict[str, str]:
    """The labels of ``configs`` that cannot be timed alone, one block each, with the
    reason a failed trial would give; FP32 is timed first, and raises if it fails (the
    user's training, not a probe)."""
    executor.confirm([("fp32", fp32)], [["fp32"]], block)
    out = {}
    for label, policy in configs:
        try:
            executor.confirm([(label, policy)], [[label]], block)
        except TrialFailed as exc:
            # A worker's failed command comes back as "confirm failed" with the engine's
            # reason as its detail; in this process, the reason itself.
            text = exc.detail if exc.reason == "confirm failed" and exc.detail else exc.reason
            out[label] = text.strip().splitlines()[0][:300]
    return out


def probe_study(
    study: Any, executor: Any, space: Any, options: Any, block: int, progress: Any
) -> tuple[dict[str, Any] | None, list[str]]:
    """The study's probes (stored ones on a resume, else measured now and stored), the
    predicted-best policy enqueued; ``(record, notes)``. A probe that breaks the model on
    one batch is localized and its group pinned float32
    (:func:`precsearch.study.pitfalls.pin_failure`); one that cannot be timed (XLA
    without a kernel for an op) is pinned as it ran, XLA off or its group float32
    (:func:`precsearch.study.pitfalls.pin_untimed`), and the others are measured without
    it; a probe command that fails otherwise (FP32 itself, or the worker died) leaves the
    search to run without them (a note says why)."""
    record = study_record(study, "probes")
    notes: list[str] = []

    def say(line: str) -> None:
        print(line, file=progress, flush=True)

    if record is None and options.probe_time > 0 and probe_params(space):
        try:
            record = run_probes(executor, space, options.probe_time, block, options.seed)
        except TrialFailed as exc:
            return None, [f"the probes failed ({one_line(exc)}): the search ran without them"]
        set_study_record(study, "probes", record)
        print(
            f"probes: {len(record['probes'])} in {record['rounds']} rounds, "
            f"{record['seconds']:.0f} s",
            file=progress,
            flush=True,
        )
        for line in probe_lines(record):
            print(f"  {line}", file=progress, flush=True)
        for line in record.get("pitfalls") or []:
            print(f"  pitfall: {line}", file=progress, flush=True)
        by_label = {label: params for label, _, _, params in probe_params(space)}
        # Each group alone before all of them together: the bisection starts small.
        for label in sorted(record.get("broken") or {}, key=lambda k: k.startswith(ALL)):
            entry = record["broken"][label]
            if entry.get("untimed"):
                pin_untimed(study, space, entry, say)
                continue
            try:
                pin_failure(study, executor, space, by_label[label], say)
            except TrialFailed as exc:
                notes.append(f"probe {label} broke and could not be localized ({one_line(exc)})")
    best = predicted_best(record, space)
    if best is not None and rejection(record, best) == "":
        enqueue_predicted_best(study, best)
    gone = ruled_out(record)
    if gone:
        said = ", ".join(
            "XLA" if p == XLA else f"{group_name(p)} {'/'.join(d)}" for p, d in gone.items()
        )
        notes.append(f"ruled out by the probes (no trial runs them): {said}")
    return record, notes
