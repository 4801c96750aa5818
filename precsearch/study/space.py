"""The search space: which policies a study may try, built from ``model_info.json``.

A space is a list of *dimensions*. Each offers categorical Optuna parameters (small,
unconditional choice lists: samplers handle those best, and a grid can enumerate them)
and writes its part of a :class:`~precsearch.policy.Policy` from the chosen values. The
parent process builds the space from the model info a worker wrote, so it never imports
TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from precsearch.errors import UserInputError
from precsearch.hardware import fast_dtypes
from precsearch.plugins import Dimension, create
from precsearch.policy import Policy
from precsearch.records import (
    EXACT_INTEGERS,
    GROUP_BY,
    SHORT_DTYPES,
    SpaceOptions,
    parse_dtypes,
    resolve_lr_rule,
)

# The dtype names, grouping and options are records (shared with plugins); they are
# re-exported here because a space is where people look for them.
__all__ = [
    "DEFAULT_DIMENSIONS",
    "GROUP_BY",
    "SHORT_DTYPES",
    "SearchSpace",
    "SpaceOptions",
    "parse_dtypes",
]

DEFAULT_DIMENSIONS = ("layer_dtypes", "loss_scale", "batch_size", "jit_compile")


class SearchSpace:
    """The dimensions of a study and the translation of parameters into policies.

    Args:
        info: The model info (``model_info.json``).
        options: Space options.
        dimensions: Dimension plugin names (``NAME`` or ``NAME=ARG``) or classes;
            default: the four built-ins.
    """

    def __init__(
        self,
        info: dict[str, Any],
        options: SpaceOptions | None = None,
        dimensions: list[str | type[Dimension]] | None = None,
    ) -> None:
        self.info = info
        # A copy: the caller's options stay as given (the space fills in dtypes and notes).
        options = options or SpaceOptions()
        self.options = dataclasses.replace(options, notes=list(options.notes))
        if self.options.dtypes is None:
            fast = fast_dtypes(info.get("gpus"))
            if not fast:
                fast = ["bfloat16"]
                self.options.notes.append(
                    "this machine has no fast low precision (no AVX512-BF16/AMX, no "
                    "suitable GPU): bfloat16 is tried anyway and FP32 is likely to win; "
                    "pass --dtypes to choose"
                )
            self.options.dtypes = ["float32", *fast]
        self.options.notes += _integer_input_notes(info, self.dtypes[1:])
        rule, why = resolve_lr_rule(self.options.lr_rule, info.get("optimizer"))
        self.options.lr_rule, self.lr_rule_why = rule, why
        self.dimensions: list[Dimension] = []
        for dim in dimensions or DEFAULT_DIMENSIONS:
            if isinstance(dim, str):
                self.dimensions.append(create("dimension", dim, info, self.options))
            else:
                self.dimensions.append(dim(info, self.options))
        owner: dict[str, str] = {}
        for dim in self.dimensions:
            for param in dim.choices():
                if param in owner:
                    raise UserInputError(
                        f"dimensions {owner[param]!r} and {dim.name!r} both define parameter "
                        f"{param!r}"
                    )
                owner[param] = dim.name
        if all(len(values) < 2 for values in self.choices().values()):
            raise UserInputError(
                f"nothing to search: dtypes {','.join(self.dtypes)} and dimensions "
                f"{', '.join(d.name for d in self.dimensions)} leave one policy only; offer "
                "a low-precision dtype (--dtypes float32,bfloat16) or more dimensions"
            )

    @property
    def dtypes(self) -> list[str]:
        """Short dtype names offered, float32 first."""
        return list(self.options.dtypes or ["float32"])

    def choices(self) -> dict[str, list[Any]]:
        """Every parameter with its choices (a grid sampler's search space)."""
        merged: dict[str, list[Any]] = {}
        for dim in self.dimensions:
            merged.update(dim.choices())
        return merged

    def describe(self) -> dict[str, Any]:
        """What defines the space, to refuse resuming a study with another one."""
        return {
            "group_by": self.options.group_by,
            "dtypes": self.dtypes,
            "lr_rule": self.options.lr_rule,
            "include_output": self.options.include_output,
            # Only the cast-aware space is named: a study made before it existed (every
            # layer searched) resumes with --casts independent.
            **({"casts": self.options.casts} if self.options.casts != "independent" else {}),
            "dimensions": [dim.name for dim in self.dimensions],
            "params": {name: [str(v) for v in values] for name, values in self.choices().items()},
        }

    def group_layers(self) -> dict[str, list[str]]:
        """The layer ids of each dtype parameter's group (layer dtype dimensions only)."""
        found: dict[str, list[str]] = {}
        for dim in self.dimensions:
            for group, ids in (getattr(dim, "groups", None) or {}).items():
                found[dim.param(group)] = list(ids)
        return found

    def suggest(self, trial: Any) -> Policy:
        """Ask an Optuna trial for every parameter and build the policy."""
        params = {
            name: trial.suggest_categorical(name, values) for name, values in self.choices().items()
        }
        return self.policy(params)

    def policy(self, params: dict[str, Any]) -> Policy:
        """The policy for a full set of parameter values; what no dimension sets is the
        user's own training (their batch size and XLA setting)."""
        users_batch = int(self.info["batch_size"])
        draft: dict[str, Any] = {
            "default": "float32",
            "types": {},
            "layers": {},
            "batch_size": users_batch,
            "lr_rule": self.options.lr_rule,
            "base_batch_size": users_batch,
            "jit_compile": bool(self.info.get("jit_compile", False)),
        }
        for dim in self.dimensions:
            dim.write(params, draft)
        return Policy(**draft)

    def twin(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The parameters of FP32 at ``params``' batch size, XLA setting and whatever
        else is not precision (``None`` when ``params`` are FP32 already): the trial
        that says what precision adds there."""
        fp32: dict[str, Any] = {}
        for dim in self.dimensions:
            if dim.precision:
                fp32.update(dim.baseline("float32"))
        twin = {**params, **fp32}
        return None if twin == params else twin

    def baselines(self) -> list[tuple[str, dict[str, Any]]]:
        """FP32 and the global recipe per low-precision dtype: ``(label, params)``."""
        out = []
        for dtype in self.dtypes:
            params: dict[str, Any] = {}
            for dim in self.dimensions:
                params.update(dim.baseline(dtype))
            label = "fp32" if dtype == "float32" else f"global_{dtype}"
            out.append((label, params))
        return out


def _integer_input_notes(info: dict[str, Any], low: list[str]) -> list[str]:
    """A note per float input that carries integers a low dtype offered rounds (token ids
    through a float ``Input``): the classic pitfall, said before any trial meets it."""
    notes = []
    for name, top in (info.get("integer_inputs") or {}).items():
        rounding = [d for d in low if top > EXACT_INTEGERS.get(d, math.inf)]
        if rounding:
            exact = ", ".join(f"{d} up to {EXACT_INTEGERS[d]}" for d in rounding)
            notes.append(
                f"{name} carries integer values up to {top:.0f} as floats, which low "
                f"precision holds exactly only so far ({exact}): a layer that computes in it "
                "and reads them as ids (Embedding, one-hot, gather) gets other ids; the search "
                "finds such a layer and keeps it float32 (an int32 Input avoids it)"
            )
    return notes
