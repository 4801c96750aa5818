"""The GPU check: whole studies of a conv net and a Transformer on Keras's JAX backend.

Made for a lent GPU machine that has JAX (and PyTorch) but no TensorFlow and no internet:
the pure-Python wheels precsearch needs travel with it (``benchmarks/gpu/README.md`` says
how). On the GPU, float16 (with loss scaling) and bfloat16 are both offered; each study
runs probes, trials, the confirmation and the export, and the page says what it found:
the answer with its interval, what FP32 itself is there (TF32), the device and versions.

    python benchmarks/gpu/run_gpu.py --out benchmarks/results/gpu        # on the GPU
    PRECSEARCH_GPU_SCALE=tiny python benchmarks/gpu/run_gpu.py --quick   # a CPU dry run

Writes ``gpu.md`` and ``gpu.csv`` into ``--out``; a study's own folder stays in ``--work``.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # precsearch from this checkout, installed or not

MODELS = ("convnet", "transformer")
# (trials, probe seconds, confirmation seconds): full fits ~4 min a study on one H100.
SETTINGS = {"full": (10, 30.0, 40.0), "quick": (2, 0.0, 1.0)}


def _study(name: str, quick: bool, work: Path) -> dict:
    import precsearch
    from precsearch.stats import instrument_percent

    trials, probe_time, confirm_time = SETTINGS["quick" if quick else "full"]
    sizes = {} if not quick else {"batch_size": 32, "steps": 10}
    t0 = time.perf_counter()
    result = precsearch.search(
        str(HERE / f"{name}.py"),
        **sizes,
        trials=trials,
        dtypes="float32,float16,bfloat16",
        probe_time=probe_time,
        confirm_time=confirm_time,
        out=str(work),
        in_process=True,
        sampler="random" if quick else "tpe",
    )
    seconds = time.perf_counter() - t0
    confirmation = result.confirmation
    policy = result.best_policy
    manifest = policy.manifest if policy is not None else {}
    best = confirmation.best if confirmation else {}
    speedup = best.get("speedup_vs_fp32") or {}
    frame = result.trials
    return {
        "model": name,
        "seconds": round(seconds, 1),
        "trials": int((frame["state"] != "WAITING").sum()),  # enqueued, never run: not counted
        "feasible": int((frame["status"] == "ok").sum()) if "status" in frame else 0,
        "answer": best.get("answer", ""),
        "speedup": speedup.get("estimate"),
        "low": speedup.get("low"),
        "high": speedup.get("high"),
        "instrument_error": instrument_percent(confirmation.null_vs_fp32) if confirmation else None,
        "verdict": confirmation.verdict if confirmation else "no confirmation",
        "hardware": manifest.get("hardware", {}),
        "versions": manifest.get("versions", {}),
    }


def _page(rows: list[dict], quick: bool) -> str:
    first = rows[0] if rows else {}
    hardware, versions = first.get("hardware", {}), first.get("versions", {})
    gpus = hardware.get("gpus") or []
    device = (
        ", ".join(
            f"{g.get('name')} (compute capability "
            f"{'.'.join(map(str, g.get('compute_capability', [])))},"
            f" FP32 matmuls in {g.get('fp32_matmul', '?')})"
            for g in gpus
        )
        or f"no GPU: {hardware.get('cpu', platform.processor())} (a dry run of the script)"
    )
    lines = [
        "# The GPU check: whole studies on Keras's JAX backend",
        "",
        f"Device: {device}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
        + f". Settings: {'quick (a CPU dry run)' if quick else 'full'};"
        " dtypes float32, float16 (loss scaling searched) and bfloat16.",
        "",
        "Speedups are the answer's samples/s over FP32's in fresh interleaved rounds, with"
        " their 95% interval; FP32 is the framework's own float32 (TF32 where the device"
        " line says so).",
        "",
        "| model | trials (feasible) | answer | speedup vs FP32 | instrument error | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = (
            f"{r['speedup']:.2f}x ({r['low']:.2f}-{r['high']:.2f})"
            if r.get("speedup")
            else "FP32 itself"
        )
        error = f"±{r['instrument_error']:.1f}%" if r.get("instrument_error") else "-"
        lines.append(
            f"| {r['model']} | {r['trials']} ({r['feasible']}) | {r['answer']} | {ratio} |"
            f" {error} | {r['seconds']:.0f} |"
        )
    lines.append("")
    for r in rows:
        lines += [f"**{r['model']}**: {r['verdict']}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE.parent / "results" / "gpu"))
    parser.add_argument("--work", default=str(HERE.parent / "work" / "gpu"))
    parser.add_argument("--quick", action="store_true", help="tiny settings: a dry run")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if args.quick:
        os.environ.setdefault("PRECSEARCH_GPU_SCALE", "tiny")
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        try:
            rows.append(_study(name, args.quick, work))
        except Exception as exc:  # one model's failure is a row, not the end of the check
            verdict = f"failed: {type(exc).__name__}: {exc}"
            rows.append({"model": name, "seconds": 0, "trials": 0, "feasible": 0,
                         "answer": "failed", "verdict": verdict})  # fmt: skip
        print(f"{name}: {rows[-1]['verdict']}", flush=True)
    (out / "gpu.md").write_text(_page(rows, args.quick))
    fields = ["model", "trials", "feasible", "answer", "speedup", "low", "high",
              "instrument_error", "seconds", "verdict"]  # fmt: skip
    with open(out / "gpu.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return 0 if all(r["answer"] != "failed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
