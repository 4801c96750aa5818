"""The built-in search dimensions: layer dtypes, loss scaling, batch size and XLA.

Each offers small, unconditional categorical choices (samplers handle those best, and a
grid can enumerate them), the neutral one first, and writes its fields of a policy draft.
"""

from __future__ import annotations

import re
from typing import Any

from precsearch.plugins import Dimension
from precsearch.policy import FOLLOW, LossScale
from precsearch.records import SHORT_DTYPES, SpaceOptions

__all__ = ["BatchSize", "JitCompile", "LayerDtypes", "LossScaling", "block_of"]


def block_of(layer_id: str) -> str:
    """The block a layer belongs to: its top-level name up to the first number.

    ``block_3_expand_BN`` → ``block_3``; ``Conv1_relu`` → ``Conv1``; ``mha/query`` →
    ``mha``; a name without a number is its own block.
    """
    top = layer_id.split("/", 1)[0]
    match = re.match(r"^(.*?\d+)(?:_|$)", top)
    return match.group(1) if match else top


class LayerDtypes(Dimension):
    """The dtype policy of groups of layers: ``dtype`` or ``dtype:<group>`` parameters.

    In the cast-aware space (``casts="follow"``, the default) only layers that compute
    (kind ``compute``; softmax too with ``sensitive``) are grouped into parameters; the
    policy says ``"follow"`` for the classes of shape and element-wise layers, so they
    take their input's dtype and add no casts, and leaves softmax and preprocessing
    layers float32. With ``casts="independent"`` every floating layer is searched.
    """

    name = "layer_dtypes"
    precision = True

    def __init__(self, info: dict[str, Any], options: SpaceOptions, arg: str | None = None) -> None:
        super().__init__(info, options, arg)
        self.dtypes = options.dtypes or ["float32"]
        self.follow = options.casts == "follow"
        searched_kinds = {"compute", "sensitive"} if options.sensitive else {"compute"}
        floating = [
            layer
            for layer in info["layers"]
            if layer["floating"] and not layer["container"] and not layer.get("unit")
        ]
        # A layer inside another layer takes that layer's dtype (the policy's unit rule):
        # only the outer one is searched. A model info written before kinds existed
        # reads every layer as computing.
        searchable = [
            layer
            for layer in floating
            if (options.include_output or not layer["output"])
            and (not self.follow or layer.get("kind", "compute") in searched_kinds)
        ]
        # The classes that follow their input, and the softmax layers of a class that
        # otherwise follows (an Activation("softmax") among Activation("relu")s).
        follows = [layer for layer in floating if self.follow and layer.get("kind") == "follow"]
        self.follow_types = sorted({layer["class"] for layer in follows})
        self.kept_float32 = [
            layer["id"]
            for layer in floating
            if layer["class"] in self.follow_types and layer not in follows
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
        classes = {layer["id"]: layer["class"] for layer in self.info["layers"]}
        for group, ids in self.groups.items():
            dtype = SHORT_DTYPES[params[self.param(group)]]
            if group_by == "global" and not self.follow:
                draft["default"] = dtype
            elif group_by in ("global", "type"):
                # In the cast-aware space the global choice names the computing classes
                # (the default stays float32 for what neither computes nor follows);
                # a types rule never reaches an output layer, so that is named.
                for layer_id in ids:
                    if layer_id in self.output_ids:
                        draft["layers"][layer_id] = dtype
                    elif group_by == "type" or dtype != "float32":
                        draft["types"][classes[layer_id]] = dtype
            else:
                for layer_id in ids:
                    draft["layers"][layer_id] = dtype
        if group_by == "global" and self.options.include_output and not self.follow:
            for layer_id in self.output_ids:
                draft["layers"][layer_id] = draft["default"]
        low = any(d != "float32" for d in (draft["default"], *draft["types"].values(),
                                           *draft["layers"].values()))  # fmt: skip
        if low:
            # Only beside a low dtype: an all-float32 policy stays plainly FP32.
            for cls in self.follow_types:
                draft["types"].setdefault(cls, FOLLOW)
            for layer_id in self.kept_float32:
                draft["layers"].setdefault(layer_id, "float32")

    def baseline(self, dtype: str) -> dict[str, Any]:
        return {self.param(group): dtype for group in self.groups}


class LossScaling(Dimension):
    """Loss-scale settings; only used by policies with some float16 layer."""

    name = "loss_scale"
    precision = True

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
        users = int(self.info["batch_size"])
        if self.options.batch_sizes:
            return [users, *[b for b in self.options.batch_sizes if b != users]]
        limit = int(self.info.get("train_examples") or 10**9)
        others = [max(8, round(users * f / 8) * 8) for f in (0.5, 2, 4)]
        return list(dict.fromkeys([users, *[b for b in others if b <= limit]]))

    def choices(self) -> dict[str, list[Any]]:
        return {"batch_size": self.sizes()}

    def write(self, params: dict[str, Any], draft: dict[str, Any]) -> None:
        draft["batch_size"] = int(params["batch_size"])


class JitCompile(Dimension):
    """Whether to compile the training step with XLA; the user's own setting first."""

    name = "jit_compile"

    def choices(self) -> dict[str, list[Any]]:
        users = bool(self.info.get("jit_compile", False))
        return {"jit_compile": [users, not users]}

    def write(self, params: dict[str, Any], draft: dict[str, Any]) -> None:
        draft["jit_compile"] = bool(params["jit_compile"])
