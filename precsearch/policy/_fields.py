"""The policy file's fields: checking each one (a bad field is one clear line) and the
loss-scale settings.

Pure data: importing this imports neither Keras nor TensorFlow.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from precsearch.errors import UserInputError

__all__ = [
    "DTYPES",
    "FOLLOW",
    "LossScale",
    "bad_field",
    "check_dtype",
    "check_positive_int",
    "check_rules",
]

DTYPES = ("float32", "mixed_bfloat16", "mixed_float16")
FOLLOW = "follow"  # a rule's value: the layer takes its input's dtype (no cast of its own)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def bad_field(field_name: str, got: Any, expected: str) -> UserInputError:
    return UserInputError(f"field {field_name!r}: got {_short(got)}, expected {expected}")


def check_dtype(field_name: str, value: Any, follow: bool = False) -> None:
    allowed = (*DTYPES, FOLLOW) if follow else DTYPES
    if not isinstance(value, str) or value not in allowed:
        raise bad_field(field_name, value, "one of " + ", ".join(allowed))


def check_positive_int(field_name: str, value: Any, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise bad_field(field_name, value, "a positive integer" + (" or null" if optional else ""))


def check_rules(field_name: str, rules: Any, regex: bool) -> None:
    if not isinstance(rules, Mapping):
        raise bad_field(field_name, rules, "an object mapping names to dtypes")
    for key, dtype in rules.items():
        if not isinstance(key, str) or not key:
            raise bad_field(field_name, key, "non-empty string keys")
        check_dtype(f"{field_name}[{key!r}]", dtype, follow=True)
        if regex:
            try:
                re.compile(key)
            except (re.error, RecursionError, OverflowError) as exc:
                raise bad_field(
                    f"{field_name}[{key!r}]", key, f"a valid regular expression ({exc})"
                ) from None


@dataclass(frozen=True)
class LossScale:
    """Loss-scale settings, used only when some layer computes in float16.

    Args:
        dynamic: ``True`` wraps the optimizer in Keras's ``LossScaleOptimizer`` (the scale
            halves on overflow and doubles after ``growth_steps`` clean steps); ``False``
            sets the optimizer's fixed ``loss_scale_factor`` to ``initial_scale``.
        initial_scale: The starting (or fixed) scale, a positive finite number.
        growth_steps: Clean steps between doublings of a dynamic scale.
    """

    dynamic: bool = True
    initial_scale: float = 2.0**15
    growth_steps: int = 2000

    def __post_init__(self) -> None:
        if not isinstance(self.dynamic, bool):
            raise bad_field("loss_scale.dynamic", self.dynamic, "true or false")
        scale = self.initial_scale
        if (
            isinstance(scale, bool)
            or not isinstance(scale, (int, float))
            or not math.isfinite(scale)
            or scale <= 0
        ):
            raise bad_field("loss_scale.initial_scale", scale, "a positive finite number")
        check_positive_int("loss_scale.growth_steps", self.growth_steps)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "dynamic": self.dynamic,
            "initial_scale": float(self.initial_scale),
            "growth_steps": self.growth_steps,
        }
