"""``precsearch doctor``: the well-known mixed-precision pitfalls, checked on one model here.

Before any trial is spent, :func:`diagnose` looks at

* the machine: GPUs and their compute capability (Tensor Cores from 7.0, fast bfloat16
  from 8.0), or the CPU's AVX512-BF16/AMX flags; and a measured micro-benchmark of a
  float32, bfloat16 and float16 matmul here (a CPU emulates float16: the figure says so);
* the model as the file builds it: an output or softmax layer that does not compute in
  float32; layer widths and channels that are not multiples of 8 (Tensor Cores want them);
* one batch through the model in float32, bfloat16 and float16 (:func:`probe`): per layer
  the largest activation and gradient against float16's range (overflow above 65504,
  gradients underflowing below ~6e-8) and any non-finite value in each dtype;
* the classic pitfalls, each layer alone in each low dtype on that batch
  (:func:`precsearch.engine.layer_checks.layer_pitfalls`): activations beyond float16's
  range, an exp, a square or a sum that overflows inside a layer, a layer that raises
  (no kernel here) or runs far slower in a low dtype; one line each, naming the layer;
* the study's budget: the FP32 runs a study starts with, and which of their figures can
  judge a candidate at that many steps (:func:`precsearch.engine.fidelity.assess`: a
  validation accuracy at chance, a loss that saturates or barely falls cannot).

Each finding comes with concrete advice; the result is also plain JSON.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from precsearch.engine.guarded import classify
from precsearch.engine.layer_checks import layer_pitfalls
from precsearch.errors import UserInputError
from precsearch.hardware import describe, fast_dtypes
from precsearch.policy import Policy
from precsearch.policy.layers import iter_layers
from precsearch.policy.numerics import FLOAT16_MAX, FLOAT16_TINY, probe
from precsearch.records import EXACT_INTEGERS, Budget

if TYPE_CHECKING:
    from precsearch.backend import Backend
    from precsearch.engine.problem import Problem

__all__ = ["diagnose", "probe", "render"]


def _benchmark(backend: Backend, gpu: bool) -> dict[str, Any]:
    """Seconds per n x n matmul in each dtype on Keras's backend, compiled as its train
    steps are, timed interleaved until the device has finished: the second fastest of 15
    each (about the 7th percentile: index 1 of 0..14)."""
    import keras

    n = 2048 if gpu else 512
    ops = {}
    for dtype in ("float32", "bfloat16", "float16"):
        a = keras.ops.cast(keras.random.normal((n, n), seed=0), dtype)
        fn = backend.compiled(lambda a: keras.ops.matmul(a, a))
        keras.ops.convert_to_numpy(fn(a))  # trace and warm up
        ops[dtype] = (fn, a)
    times: dict[str, list[float]] = {d: [] for d in ops}
    for _ in range(15):
        for dtype, (fn, a) in ops.items():
            t0 = time.perf_counter()
            keras.ops.convert_to_numpy(fn(a))  # waits for the device, as .numpy() did
            times[dtype].append(time.perf_counter() - t0)
    second = {d: sorted(t)[1] for d, t in times.items()}
    return {
        "size": n,
        "seconds": second,
        "vs_float32": {d: second["float32"] / second[d] for d in second},
    }


WIDTH_ATTRS = {
    "Dense": "units",
    "Conv1D": "filters",
    "Conv2D": "filters",
    "Conv3D": "filters",
    "Conv2DTranspose": "filters",
    "SeparableConv2D": "filters",
    "Embedding": "output_dim",
    "LSTM": "units",
    "GRU": "units",
}


def _widths(model: Any, outputs: set[str]) -> list[dict[str, Any]]:
    found = []
    for record, layer in iter_layers(model):
        attr = WIDTH_ATTRS.get(type(layer).__name__)
        width = getattr(layer, attr, None) if attr else None
        if isinstance(width, int) and width % 8 and record.id not in outputs:
            found.append({"layer": record.id, "class": record.class_name, "width": width})
    return found


def _softmax_and_output(model: Any) -> list[dict[str, Any]]:
    found = []
    for record, layer in iter_layers(model):
        if record.is_model or not record.floating:
            continue
        activation = getattr(getattr(layer, "activation", None), "__name__", "")
        softmax = type(layer).__name__ == "Softmax" or activation == "softmax"
        dtype = layer.dtype_policy.compute_dtype
        if (record.is_output or softmax) and dtype != "float32":
            what = "output layer" if record.is_output else "softmax"
            found.append({"layer": record.id, "what": what, "dtype": dtype})
    return found


def _judging(problem: Problem, budget: Budget) -> dict[str, Any]:
    """Which figures of the FP32 runs can judge at the budget, as a study would see them."""
    from precsearch.engine.fidelity import assess, judging_note
    from precsearch.engine.references import References

    reference = References(problem).get(problem.baseline(), budget)
    assessment = assess(reference)
    return {
        "steps": budget.steps,
        "figures": assessment,
        "note": judging_note(assessment, budget.steps),
        "nothing": bool(assessment) and all(assessment.values()),
    }


def diagnose(problem: Problem, budget: Budget | None = None) -> dict[str, Any]:
    """Every check of the module doc on one built :class:`~precsearch.engine.problem.Problem`;
    ``budget`` is the study's (default: the model file's ``steps``, else 120)."""
    budget = budget or Budget(steps=int(problem.spec.config.get("steps") or Budget().steps))
    gpus = problem.info.gpus
    hardware = describe(gpus)
    capability = min((tuple(g.get("compute_capability") or (0, 0)) for g in gpus), default=None)
    hardware["tensor_cores"] = bool(capability and capability >= (7, 0))
    hardware["fast_dtypes"] = fast_dtypes(gpus)
    model = problem.build()
    outputs = {layer["id"] for layer in problem.info.layers if layer["output"]}
    batch = next(iter(problem.dataset(min(problem.batch_size, problem.n_train), seed=0)))
    probes, errors = {}, {}
    for dtype in ("float32", "mixed_bfloat16", "mixed_float16"):
        candidate = problem.model_for(Policy(default=dtype), seed=0)
        short = dtype.removeprefix("mixed_")
        try:
            probes[short] = probe(candidate, (batch[0], batch[1]))
        except UserInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - a dtype that breaks the model is a finding
            if short == "float32":
                raise
            probes[short], errors[short] = [], classify(exc)[0]
    return {
        "model": problem.spec.source,
        "hardware": hardware,
        "matmul": _benchmark(problem.backend, bool(gpus)),
        "not_float32": _softmax_and_output(model),
        "widths": _widths(model, outputs),
        "probe": probes,
        "judging": (judging := _judging(problem, budget)),
        "errors": errors,
        "pitfalls": (found := layer_pitfalls(problem.model_for(problem.baseline(), 0), batch[0])),
        "advice": _pitfall_advice(problem.info.integer_inputs, errors)
        + [finding["line"] for finding in found]
        + _advice(hardware, probes, _softmax_and_output(model), _widths(model, outputs))
        + _judging_advice(judging),
    }


def _pitfall_advice(integer_inputs: dict[str, float], errors: dict[str, str]) -> list[str]:
    """Float inputs carrying integers a low dtype rounds, and a whole-model low dtype
    that raises on one batch."""
    advice = []
    for name, top in integer_inputs.items():
        rounding = [d for d, exact in EXACT_INTEGERS.items() if top > exact]
        if rounding:
            advice.append(
                f"{name} carries integer values up to {top:.0f} as floats: "
                + ", ".join(f"{d} holds integers exactly only up to {EXACT_INTEGERS[d]}"
                            for d in rounding)
                + "; a layer computing in it that reads them as ids (Embedding, one-hot, "
                "gather) gets other ids: keep such layers float32, or give the Input dtype int32"
            )  # fmt: skip
    for dtype, reason in errors.items():
        advice.append(
            f"the whole model in {dtype} fails on one batch ({reason}): a search finds the "
            "layer group to blame and keeps it float32"
        )
    return advice


def _judging_advice(judging: dict[str, Any]) -> list[str]:
    if judging["nothing"]:
        return [
            f"nothing can judge a candidate at {judging['steps']} steps: "
            f"{'; '.join(judging['figures'].values())}; a study would refuse: raise --steps"
        ]
    return [judging["note"]] if judging["note"] else []


def _advice(hardware: dict, probes: dict, not_float32: list, widths: list) -> list[str]:
    advice = []
    if not hardware["fast_dtypes"]:
        advice.append(
            "this machine has no fast low precision (no AVX512-BF16/AMX, no Tensor Cores): "
            "expect FP32 to win; search with --dtypes float32,bfloat16 to measure it anyway"
        )
    if not hardware["gpus"]:
        advice.append("float16 on a CPU is emulated: do not search it here (--dtypes)")
    for item in not_float32:
        advice.append(
            f"{item['what']} {item['layer']} computes in {item['dtype']}: keep it float32 "
            "(precsearch does for the output layer unless a policy names it)"
        )
    if widths:
        names = ", ".join(f"{w['layer']} ({w['width']})" for w in widths[:5])
        advice.append(
            f"widths not a multiple of 8 slow Tensor Cores: {names}; pad them where you can"
        )
    fp32 = {row["layer"]: row for row in probes["float32"]}
    over = [r["layer"] for r in fp32.values() if r["max_activation"] > FLOAT16_MAX]
    if over:
        advice.append(
            f"activations overflow float16 in {', '.join(over[:5])}: keep them float32 or bfloat16"
        )
    tiny = [
        r["layer"]
        for r in fp32.values()
        if r["min_gradient"] is not None and r["min_gradient"] < FLOAT16_TINY
    ]
    if tiny:
        advice.append(
            f"gradients below float16's ~6e-8 in {', '.join(tiny[:5])}: float16 needs loss "
            "scaling there (precsearch adds it)"
        )
    for dtype in ("bfloat16", "float16"):
        bad = [r["layer"] for r in probes[dtype] if r["nonfinite"]]
        if bad:
            advice.append(f"{dtype} gives non-finite values first in {bad[0]}: keep it float32")
    return advice


def render(report: dict[str, Any]) -> str:
    """The report as a short text table and the advice, for a terminal."""
    hw = report["hardware"]
    m = report["matmul"]
    lines = [
        f"Model: {report['model']}",
        f"Machine: {hw['cpu']}; GPUs: {', '.join(g['name'] for g in hw['gpus']) or 'none'}; "
        f"fast low precision: {', '.join(hw['fast_dtypes']) or 'none'}",
        f"{m['size']}x{m['size']} matmul vs float32 here: "
        + ", ".join(
            f"{d} {m['vs_float32'][d]:.2f}x"
            + (" (emulated)" if d == "float16" and not hw["gpus"] else "")
            for d in ("bfloat16", "float16")
        ),
        "",
        f"{'layer':<28} {'class':<18} {'max |act| fp32':>14} {'max |grad| fp32':>15}  bf16  fp16",
    ]
    by_dtype = {d: {r["layer"]: r for r in rows} for d, rows in report["probe"].items()}
    for row in report["probe"]["float32"]:
        flags = []
        for dtype in ("bfloat16", "float16"):
            other = by_dtype[dtype].get(row["layer"])
            flags.append("NaN " if other and other["nonfinite"] else "ok  ")
        grad = f"{row['max_gradient']:.3g}" if row["max_gradient"] is not None else "-"
        lines.append(
            f"{row['layer'][:28]:<28} {row['class'][:18]:<18} {row['max_activation']:>14.3g} "
            f"{grad:>15}  {'  '.join(flags)}"
        )
    judging = report["judging"]
    can = [name for name, why in judging["figures"].items() if not why]
    lines += [
        "",
        f"At {judging['steps']} steps, FP32's runs can judge a candidate on: "
        + (", ".join(can) or "nothing"),
        "",
        "Advice:",
        *[f"- {a}" for a in report["advice"] or ["no known pitfall found"]],
    ]
    return "\n".join(lines)
