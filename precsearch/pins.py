"""The pins' record read back: which layer groups stay float32, and why, in words.

A *pin* is a finding of the search (:mod:`precsearch.study.pitfalls`): a layer group that
breaks the model in one low dtype (an error, a non-finite loss or gradient on a batch; or,
on runs of a trial's budget, training worse than FP32 or a collapsing loss scale), kept
float32 from then on; or XLA, where the probes found that it cannot run the model
here (``jit_compile=True``: XLA has no kernel for one of its ops), kept off. The study
stores its pins (``pins``: ``"<param>=<dtype>"`` to the pin) and reuses them when it
resumes; everything that reads them is here, below both the Optuna side (a policy that
puts a pinned group in its dtype is answered without a trial) and
:mod:`precsearch.results` (the lines of ``show``, report.html and the manifest).
"""

from __future__ import annotations

import re
from typing import Any

from precsearch.cost_model import XLA, group_name, is_dtype_param
from precsearch.records import EXACT_INTEGERS

__all__ = ["breaks", "cause", "pin_key", "pin_lines", "pinned_reason"]

_INDEX = re.compile(r"indices\[[\d,]+\] = (-?\d+) is not in \[0, (\d+)\)")


def breaks(numbers: dict[str, Any]) -> str:
    """Why one batch's numbers under a policy say it breaks the model (``""`` when they
    do not): its error, or a non-finite loss or gradient."""
    if numbers.get("error"):
        return str(numbers["error"])
    if numbers.get("loss_error") is None or numbers.get("gradient_error") is None:
        what = "loss" if numbers.get("loss_error") is None else "gradient"
        problem = numbers.get("problem")
        return f"non-finite {what} on one batch" + (f" ({problem})" if problem else "")
    return ""


def pin_key(param: str, dtype: str) -> str:
    """The key of a group's pin in one dtype: ``dtype:Embedding=bfloat16``."""
    return f"{param}={dtype}"


def pinned_reason(pins: dict[str, Any] | None, params: dict[str, Any]) -> str:
    """Why a policy with ``params`` is answered from the pins without a trial (``""``
    when it puts no pinned group in its pinned dtype, nor takes a pinned XLA setting)."""
    for param, value in params.items():
        pinned = is_dtype_param(param) or param == XLA
        pin = (pins or {}).get(pin_key(param, str(value))) if pinned else None
        if pin is not None and param == XLA:
            return f"XLA: {pin['reason']} (not compilable here)"
        if pin is not None:
            return f"pinned float32: {group_name(param)} in {value} ({pin['reason']})"
    return ""


def cause(pin: dict[str, Any], integer_inputs: dict[str, float] | None = None) -> str:
    """A pin's cause in words, with what to do about it."""
    dtype, reason = pin["dtype"], pin["reason"]
    if pin["param"] == XLA:
        return f"XLA cannot run the model here ({reason}): train without XLA"
    index = _INDEX.search(f"{reason} {pin.get('detail', '')}")
    exact = EXACT_INTEGERS.get(dtype)
    if index and exact:
        held = [
            f"{name} up to {top:.0f}" for name, top in (integer_inputs or {}).items() if top > exact
        ]
        whose = f"its input holds integer ids ({', '.join(held)})" if held else "it reads ids"
        return (
            f"{whose}; {dtype} holds integers exactly only up to {exact}, so an id became "
            f"{index[1]}, out of the layer's range [0, {index[2]}): keep it float32, or give "
            "the Input dtype int32"
        )
    if pin.get("found"):  # a finding of training, not of one batch
        return f"{reason}, found {pin['found']}: keep it float32"
    if pin.get("problem"):
        return f"{reason} in {dtype}: keep it float32 (or scale what it computes down)"
    return f"{dtype} breaks it ({reason}): keep it float32"


def pin_lines(pins: dict[str, Any] | None, integer_inputs: dict[str, float] | None) -> list[str]:
    """One line per pinned group for people: the group, its layers, the cause."""
    lines = []
    for pin in (pins or {}).values():
        layers = pin.get("layers") or []
        shown = ", ".join(layers[:4]) + (f" +{len(layers) - 4}" if len(layers) > 4 else "")
        where = f" ({shown})" if shown else ""
        together = pin.get("together_with") or []
        also = f", together with {', '.join(group_name(p) for p in together)}" if together else ""
        if pin["param"] == XLA:
            lines.append(f"XLA stays off: {cause(pin)}")
            continue
        lines.append(
            f"{group_name(pin['param'])}{where} stays float32 in {pin['dtype']}{also}: "
            f"{cause(pin, integer_inputs)}"
        )
    return lines
