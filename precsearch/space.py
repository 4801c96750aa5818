"""The search space: which policies a study may try, built from ``model_info.json``.

A space is a list of *dimensions*. Each offers categorical Optuna parameters (small,
unconditional choice lists: samplers handle those best, and a grid can enumerate them)
and writes its part of a :class:`~precsearch.policy.Policy` from the chosen values. The
parent process builds the space from the model info a worker wrote, so it never imports
TensorFlow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from precsearch.errors import UserInputError
from precsearch.hardware import fast_dtypes
from precsearch.plugins._base import Dimension
from precsearch.policy import LR_RULES, LossScale, Policy

__all__ = [
    "GROUP_BY",
    "SHORT_DTYPES",
    "DEFAULT_DIMENSIONS",
    "BatchSize",
    "JitCompile",
    "LayerDtypes",
    "LossScaling",
    "SearchSpace",
    "SpaceOptions",
    "parse_dtypes",
]

SHORT_DTYPES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
GROUP_BY = ("global", "type", "block", "layer")


def parse_dtypes(text: str | list[str] | tuple[str, ...]) -> list[str]:
    """``"float32,bfloat16"`` (short names) as a list with float32 first."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = [item.strip() for item in items if item.strip()]
    unknown = [name for name in names if name not in SHORT_DTYPES]
    if unknown or not names:
        raise UserInputError(
            f"--dtypes {','.join(names) or text!r}: expected short names from "
            f"{', '.join(SHORT_DTYPES)} separated by commas"
        )
    return ["float32"] + [name for name in dict.fromkeys(names) if name != "float32"]


@dataclass
class SpaceOptions:
    """Choices that shape a space.

    Args:
        group_by: ``global`` (one dtype), ``type`` (one per layer class), ``block``
            (one per layer-name prefix such as ``block_3``) or ``layer``.
        dtypes: Short dtype names to offer, float32 first; ``None`` offers float32 plus
            what this hardware runs fast (see :mod:`precsearch.hardware`).
        include_output: Search the output layer's dtype too (default: keep float32).
        lr_rule: How the learning rate follows the batch size.
        batch_sizes: Candidate batch sizes; ``None`` picks some around the model's own.
    """

    group_by: str = "type"
    dtypes: list[str] | None = None
    include_output: bool = False
    lr_rule: str = "linear"
    batch_sizes: list[int] | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.group_by not in GROUP_BY:
            raise UserInputError(
                f"--group-by {self.group_by!r}: expected one of {', '.join(GROUP_BY)}"
            )
        if self.lr_rule not in LR_RULES:
            raise UserInputError(
                f"--lr-rule {self.lr_rule!r}: expected one of {', '.join(LR_RULES)}"
            )
        if self.dtypes is not None:
            self.dtypes = parse_dtypes(self.dtypes)


def block_of(layer_id: str) -> str:
    """The block a layer belongs to: its top-level name up to the first number.

    ``block_3_expand_BN`` → ``block_3``; ``Conv1_relu`` → ``Conv1``; ``mha/query`` →
    ``mha``; a name without a number is its own block.
    """
    top = layer_id.split("/", 1)[0]
    match = re.match(r"^(.*?\d+)(?:_|$)", top)
    return match.group(1) if match else top


class LayerDtypes(Dimension):
    """The dtype policy of groups of layers: ``dtype`` or ``dtype:<group>`` parameters."""

    name = "layer_dtypes"

    def __init__(self, info: dict[str, Any], options: SpaceOptions, arg: str | None = None) -> None:
        super().__init__(info, options, arg)
        self.dtypes = options.dtypes or ["float32"]
        searchable = [
            layer
            for layer in info["layers"]
            if layer["floating"]
            and not layer["container"]
            and (options.include_output or not layer["output"])
        ]
        groups: dict[str, list[str]] = {}
        for layer in searchable:
            key = {
                "global": "",
                "type": layer["class"],
                "block": block_of(layer["id"]),
                "layer": layer["id"],
            }[options.group_by]
            groups.setdefault(key, []).append(layer["id"])
        self.groups = groups
        self.output_ids = [layer["id"] for layer in info["layers"] if layer["output"]]

    def param(self, group: str) -> str:
        """The Optuna parameter name of a group."""
        return f"dtype:{group}" if group else "dtype"

    def choices(self) -> dict[str, list[Any]]:
        return {self.param(group): list(self.dtypes) for group in self.groups}

    def write(self, params: dict[str, Any], draft: dict[str, Any]) -> None:
        group_by = self.options.group_by
        for group, ids in self.groups.items():
            dtype = SHORT_DTYPES[params[self.param(group)]]
            if group_by == "global":
                draft["default"] = dtype
            elif group_by == "type":
                draft["types"][group] = dtype
            else:
                for layer_id in ids:
                    draft["layers"][layer_id] = dtype
        if group_by == "global" and self.options.include_output:
            for layer_id in self.output_ids:
                draft["layers"][layer_id] = draft["default"]

    def baseline(self, dtype: str) -> dict[str, Any]:
        return {self.param(group): dtype for group in self.groups}


class LossScaling(Dimension):
    """Loss-scale settings; only used by policies with some float16 layer."""

    name = "loss_scale"

    def choices(self) -> dict[str, list[Any]]:
        if "float16" not in (self.options.dtypes or []):
            return {}
        return {
            "loss_scale": ["dynamic", "fixed"],
            "loss_scale_log2": [15, 8, 12, 20, 24],
            "loss_scale_growth": [2000, 500, 100],
        }

    def write(self, params: dict[str, Any], draft: dict[str, Any]) -> None:
        if "loss_scale" not in params:
            return
        draft["loss_scale"] = LossScale(
            dynamic=params["loss_scale"] == "dynamic",
            initial_scale=float(2 ** params["loss_scale_log2"]),
            growth_steps=int(params["loss_scale_growth"]),
        )


class BatchSize(Dimension):
    """The batch size, around the model's own, in multiples of 8."""

    name = "batch_size"

    def sizes(self) -> list[int]:
        """Candidate batch sizes, the model's own first."""
        own = int(self.info["batch_size"])
        if self.options.batch_sizes:
            return [own, *[b for b in self.options.batch_sizes if b != own]]
        limit = int(self.info.get("train_examples") or 10**9)
        others = [max(8, round(own * f / 8) * 8) for f in (0.5, 2, 4)]
        return list(dict.fromkeys([own, *[b for b in others if b <= limit]]))

    def choices(self) -> dict[str, list[Any]]:
        return {"batch_size": self.sizes()}

    def write(self, params: dict[str, Any], draft: dict[str, Any]) -> None:
        draft["batch_size"] = int(params["batch_size"])


class JitCompile(Dimension):
    """Whether to compile the training step with XLA."""

    name = "jit_compile"

    def choices(self) -> dict[str, list[Any]]:
        return {"jit_compile": [False, True]}

    def write(self, params: dict[str, Any], draft: dict[str, Any]) -> None:
        draft["jit_compile"] = bool(params["jit_compile"])


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
        from precsearch.plugins import create

        self.info = info
        self.options = options or SpaceOptions()
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
            "dimensions": [dim.name for dim in self.dimensions],
            "params": {name: [str(v) for v in values] for name, values in self.choices().items()},
        }

    def suggest(self, trial: Any) -> Policy:
        """Ask an Optuna trial for every parameter and build the policy."""
        params = {
            name: trial.suggest_categorical(name, values) for name, values in self.choices().items()
        }
        return self.policy(params)

    def policy(self, params: dict[str, Any]) -> Policy:
        """The policy for a full set of parameter values."""
        own = int(self.info["batch_size"])
        draft: dict[str, Any] = {
            "default": "float32",
            "types": {},
            "layers": {},
            "batch_size": own,
            "lr_rule": self.options.lr_rule,
            "base_batch_size": own,
        }
        for dim in self.dimensions:
            dim.write(params, draft)
        return Policy(**draft)

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
