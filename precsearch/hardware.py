"""What this machine computes fast, read without importing TensorFlow.

CPUs: bfloat16 is fast with AVX512-BF16 or AMX; float16 is emulated on CPUs (it can be
70-1000x slower), so it is never offered there by default. GPUs (details recorded by the
worker, which has TensorFlow): bfloat16 from compute capability 8.0 (Ampere), float16
from 7.0 (Volta).
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

__all__ = ["cpu_flags", "describe", "describe_fingerprint", "fast_dtypes", "fingerprint"]

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags() -> set[str]:
    """The CPU feature flags of this machine (empty where /proc/cpuinfo is missing)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fast_dtypes(gpus: list[dict[str, Any]] | None = None) -> list[str]:
    """Low-precision dtypes (short names) this machine runs fast, best first."""
    if gpus:
        capability = min(tuple(g.get("compute_capability") or (0, 0)) for g in gpus)
        dtypes = []
        if capability >= (8, 0):
            dtypes.append("bfloat16")
        if capability >= (7, 0):
            dtypes.append("float16")
        return dtypes
    return ["bfloat16"] if cpu_flags() & set(BF16_CPU_FLAGS) else []


def describe(gpus: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Hardware facts for a policy's manifest and a study's report."""
    import os

    flags = cpu_flags()
    return {
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_low_precision_flags": sorted(
            f
            for f in flags
            if f in BF16_CPU_FLAGS or f in ("avx512f", "avx512_fp16", "amx_fp16", "avx2")
        ),
        "gpus": gpus or [],
        "machine": platform.machine(),
    }


def fingerprint(gpus: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What decides speed figures here: CPU model and low-precision flags, GPUs.

    Workers of one study must share it, or their speedups would not compare.
    """
    hw = describe(gpus)
    return {
        "cpu": hw["cpu"],
        "cpu_low_precision_flags": hw["cpu_low_precision_flags"],
        "gpus": sorted(g.get("name", "?") for g in hw["gpus"]),
    }


def describe_fingerprint(print_: dict[str, Any]) -> str:
    """A fingerprint in words."""
    flags = ", ".join(print_.get("cpu_low_precision_flags", [])) or "no vector flags of note"
    gpus = ", ".join(print_.get("gpus", [])) or "no GPU"
    return f"{print_.get('cpu', '?')} ({flags}; {gpus})"
