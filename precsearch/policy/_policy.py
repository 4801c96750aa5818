"""The mixed-precision policy: what to compute in which dtype, and how to train it.

A :class:`Policy` is pure data (it round-trips through a JSON file, never pickle) and
knows how to put itself onto any Keras model: :meth:`Policy.apply` walks every nested
layer, :meth:`Policy.wrap_optimizer` adds loss scaling where float16 needs it, and
:meth:`Policy.compile` does both and recompiles. Keras and TensorFlow are imported only
inside those methods, so reading a policy file stays cheap.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precsearch.errors import UserInputError, read_user_file
from precsearch.files import write_text_atomic
from precsearch.policy._fields import (
    DTYPES,
    FOLLOW,
    LossScale,
    bad_field,
    check_dtype,
    check_positive_int,
    check_rules,
)
from precsearch.policy.layers import LayerRecord, iter_layers
from precsearch.records import LR_RULES

__all__ = [
    "DTYPES",
    "FOLLOW",
    "FORMAT",
    "LR_RULES",
    "LossScale",
    "Policy",
    "load_policy",
]

FORMAT = "precsearch.policy/1"
# Version 2 adds the "follow" rule value; a policy without one is still written as
# version 1, so that older readers take it.
FORMAT_FOLLOW = "precsearch.policy/2"
FORMATS = (FORMAT, FORMAT_FOLLOW)


@dataclass
class Policy:
    """A mixed-precision training policy for a Keras model.

    Which dtype a layer computes in is decided, first match wins, by: its exact id or
    name in ``layers``; its class name in ``types``; the first key of ``layers`` that
    ``re.fullmatch``-es its name; ``default``. The model's output layer stays float32
    unless ``layers`` names it (by id, name or regex). A layer inside another layer (not
    a model: a custom layer that combines its sublayers' outputs) takes that layer's
    dtype unless ``layers`` names it exactly. Variables always stay float32.

    A ``types`` or ``layers`` rule may say ``"follow"``: the layer takes the dtype of
    the layers that feed it (float32 when they disagree, when the model's input feeds
    it, or when the model's call order is invisible), so a shape or element-wise layer
    between two bfloat16 layers adds no casts. Such a policy is written as format
    ``precsearch.policy/2``; version 1 files load as before.

    Args:
        default: Dtype policy for layers no rule names: ``"float32"``,
            ``"mixed_bfloat16"`` or ``"mixed_float16"``.
        types: Layer class name to dtype policy (or ``"follow"``).
        layers: Layer id, name or regular expression to dtype policy (or ``"follow"``);
            order matters for regexes.
        loss_scale: Used when any layer computes in float16.
        batch_size: The batch size to train with; ``None`` keeps the user's own.
        lr_rule: How the learning rate follows the batch size: ``"none"``, ``"linear"``
            or ``"sqrt"`` (relative to ``base_batch_size``).
        base_batch_size: The batch size the model's learning rate was chosen for.
        jit_compile: Whether to compile the training step with XLA.
        manifest: Free JSON data: confirmed figures, hardware, versions. Not compared.
    """

    default: str = "float32"
    types: dict[str, str] = field(default_factory=dict)
    layers: dict[str, str] = field(default_factory=dict)
    loss_scale: LossScale = field(default_factory=LossScale)
    batch_size: int | None = None
    lr_rule: str = "none"
    base_batch_size: int | None = None
    jit_compile: bool = False
    manifest: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        check_dtype("default", self.default)
        check_rules("types", self.types, regex=False)
        check_rules("layers", self.layers, regex=True)
        if not isinstance(self.loss_scale, LossScale):
            raise bad_field("loss_scale", self.loss_scale, "a LossScale")
        check_positive_int("batch_size", self.batch_size, optional=True)
        check_positive_int("base_batch_size", self.base_batch_size, optional=True)
        if not isinstance(self.lr_rule, str) or self.lr_rule not in LR_RULES:
            raise bad_field("lr_rule", self.lr_rule, "one of " + ", ".join(LR_RULES))
        if not isinstance(self.jit_compile, bool):
            raise bad_field("jit_compile", self.jit_compile, "true or false")
        if not isinstance(self.manifest, dict):
            raise bad_field("manifest", self.manifest, "an object")
        self.types = dict(self.types)
        self.layers = dict(self.layers)

    def dtype_for(self, record: LayerRecord) -> tuple[str, str]:
        """The dtype policy for one layer and the rule that decided it.

        Returns:
            ``(dtype, rule)`` where ``rule`` is e.g. ``"layers['dense_1']"``,
            ``"types['Dense']"``, ``"default"`` or ``"output"``.
        """
        for key in (record.id, record.name):
            if key in self.layers:
                return self.layers[key], f"layers[{key!r}]"
        if not record.is_output and record.class_name in self.types:
            return self.types[record.class_name], f"types[{record.class_name!r}]"
        for key in self.layers:
            if re.fullmatch(key, record.name):
                return self.layers[key], f"layers[{key!r}]"
        if record.is_output:
            return "float32", "output"
        return self.default, "default"

    def decide(self, records: list[LayerRecord]) -> list[tuple[str, str]]:
        """``(dtype, rule)`` for each of a model's layer records, in walk order: what
        :meth:`dtype_for` says, except that a layer inside another layer (its ``unit``)
        takes that layer's dtype unless ``layers`` names it exactly (rule ``"unit"``),
        and a ``"follow"`` rule is resolved through the layer's inputs (its rule gets
        `` follow`` appended)."""
        by_id = {record.id: record for record in records}
        by_rule = {record.id: self.dtype_for(record) for record in records}
        decided: dict[str, tuple[str, str]] = {}

        def resolve(record: LayerRecord, seen: frozenset[str]) -> tuple[str, str]:
            if record.id in decided:
                return decided[record.id]
            dtype, rule = by_rule[record.id]
            named = record.id in self.layers or record.name in self.layers
            if record.unit is not None and record.unit in by_id and not named:
                dtype, rule = resolve(by_id[record.unit], seen)[0], "unit"
            elif dtype == FOLLOW:
                feeding = {
                    resolve(by_id[i], seen | {record.id})[0]
                    for i in record.inputs
                    if i in by_id and i not in seen and by_id[i].floating
                }
                dtype = feeding.pop() if len(feeding) == 1 else "float32"
                rule += " follow"
            decided[record.id] = (dtype, rule)
            return dtype, rule

        return [resolve(record, frozenset()) for record in records]

    def _plan(self, model: Any, strict: bool) -> list[tuple[LayerRecord, Any, str]]:
        plan = []
        used: set[str] = set()
        walked = iter_layers(model)
        decisions = self.decide([record for record, _ in walked])
        for (record, layer), (dtype, _) in zip(walked, decisions, strict=True):
            used.add(self.dtype_for(record)[1])
            # A types rule that only misses because the class's one layer is the output
            # still refers to something real.
            if record.is_output and record.class_name in self.types:
                used.add(f"types[{record.class_name!r}]")
            plan.append((record, layer, dtype))
        unused = [f"layers[{k!r}]" for k in self.layers] + [f"types[{k!r}]" for k in self.types]
        unused = [rule for rule in unused if rule not in used]
        if unused:
            ids = [record.id for record, _, _ in plan[:5]]
            more = ", ..." if len(plan) > 5 else ""
            message = (
                f"policy rule {unused[0]} matches no layer of model {model.name!r} "
                f"(layer ids include: {', '.join(ids)}{more})"
            )
            if strict:
                raise UserInputError(message)
            warnings.warn(message, stacklevel=3)
        return plan

    def assignments(self, model: Any) -> dict[str, str]:
        """What :meth:`apply` would set: ``{layer id: dtype policy name}``, for people.

        Nested models (containers that compute nothing themselves) and non-floating
        layers are left out.
        """
        return {
            record.id: dtype
            for record, _, dtype in self._plan(model, strict=False)
            if record.floating and not record.is_model
        }

    def uses_float16(self, model: Any = None) -> bool:
        """Whether any layer computes in float16 (and so needs loss scaling).

        Without a model, whether any rule or the default asks for float16.
        """
        if model is None:
            return "mixed_float16" in self.rule_dtypes()
        return "mixed_float16" in self.assignments(model).values()

    def rule_dtypes(self) -> set[str]:
        """The dtype policies the default and the rules name (``"follow"`` is none)."""
        return {self.default, *self.types.values(), *self.layers.values()} - {FOLLOW}

    def apply(self, model: Any, strict: bool = True) -> Any:
        """Set every nested layer's dtype policy, in place.

        Keras does not recurse into a container's children when its policy is set, so
        each layer is set on its own. The model's traced functions are dropped so that
        the next ``fit`` retraces; recompile (:meth:`compile`) to be sure.

        Args:
            model: Any built or unbuilt Keras model (Sequential, Functional, subclassed).
            strict: Raise :class:`UserInputError` when a ``layers`` or ``types`` rule
                matches no layer (otherwise warn).

        Returns:
            The same model.
        """
        for record, layer, dtype in self._plan(model, strict):
            if record.is_model or not record.floating:
                continue
            if layer.dtype_policy.name != dtype:
                layer.dtype_policy = dtype
        for attr in ("train_function", "test_function", "predict_function"):
            if getattr(model, attr, None) is not None:
                setattr(model, attr, None)
        return model

    def wrap_optimizer(self, optimizer: Any, model: Any = None) -> Any:
        """Add the loss scaling float16 needs; return the optimizer to compile with.

        Keras wraps an optimizer in ``LossScaleOptimizer`` only when the *global* policy
        is ``mixed_float16``, so per-layer float16 would otherwise train unscaled. With
        no float16 layer the optimizer is returned unwrapped.

        Args:
            optimizer: A Keras optimizer instance (an existing ``LossScaleOptimizer`` is
                unwrapped or reused, keeping the inner optimizer's state).
            model: If given, float16 is judged by the layers of this model.
        """
        import keras

        lso_class = keras.optimizers.LossScaleOptimizer
        inner = optimizer.inner_optimizer if isinstance(optimizer, lso_class) else optimizer
        if not self.uses_float16(model):
            return inner
        scale = self.loss_scale
        if not scale.dynamic:
            inner.loss_scale_factor = float(scale.initial_scale)
            return inner
        if (
            isinstance(optimizer, lso_class)
            and float(optimizer.initial_scale) == float(scale.initial_scale)
            and optimizer.dynamic_growth_steps == scale.growth_steps
        ):
            return optimizer
        return lso_class(
            inner,
            initial_scale=float(scale.initial_scale),
            dynamic_growth_steps=scale.growth_steps,
        )

    def compile(self, model: Any, optimizer: Any = "rmsprop", strict: bool = True, **kwargs: Any):
        """Apply the policy, wrap the optimizer and (re)compile the model.

        Args:
            model: The Keras model.
            optimizer: An optimizer name, config or instance; passing the model's own
                optimizer object keeps its state.
            strict: As in :meth:`apply`.
            **kwargs: Passed to ``model.compile`` (``loss``, ``metrics``, ...);
                ``jit_compile`` defaults to the policy's.

        Returns:
            The same model, compiled.

        The learning rate is not changed here: build the optimizer with
        :meth:`scaled_learning_rate` when the policy's batch size differs from yours.
        """
        import keras

        self.apply(model, strict=strict)
        if isinstance(optimizer, (str, dict)):
            optimizer = keras.optimizers.get(optimizer)
        kwargs.setdefault("jit_compile", self.jit_compile)
        model.compile(optimizer=self.wrap_optimizer(optimizer, model), **kwargs)
        return model

    def callbacks(self, **kwargs: Any) -> list[Any]:
        """The Keras callbacks a training run under this policy should use: a
        :class:`precsearch.PolicyGuard` (``kwargs`` go to it), which stops training when
        its numerics go wrong and says where."""
        from precsearch.policy.numerics import PolicyGuard

        return [PolicyGuard(self, **kwargs)]

    def lr_factor(self) -> float:
        """What :attr:`lr_rule` multiplies the learning rate by at :attr:`batch_size`:
        ``batch_size / base_batch_size`` (``linear``), its square root (``sqrt``), or 1
        (``none``, or either batch size unset)."""
        if self.lr_rule == "none" or self.batch_size is None or self.base_batch_size is None:
            return 1.0
        ratio = self.batch_size / self.base_batch_size
        return ratio if self.lr_rule == "linear" else math.sqrt(ratio)

    def scaled_learning_rate(self, base_lr: float) -> float:
        """The learning rate for :attr:`batch_size` by :attr:`lr_rule` (:meth:`lr_factor`)."""
        return base_lr * self.lr_factor()

    def scale_optimizer(self, optimizer: Any) -> Any:
        """A Keras optimizer with its learning rate for :attr:`batch_size`, before it is
        built (:func:`precsearch.policy.schedules.scale_optimizer`; a schedule is kept whole,
        its values scaled)."""
        from precsearch.policy.schedules import scale_optimizer

        return scale_optimizer(optimizer, self.lr_factor())

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``"format": "precsearch.policy/1"``, or ``/2`` when a rule
        says ``"follow"``)."""
        follows = FOLLOW in {*self.types.values(), *self.layers.values()}
        return {
            "format": FORMAT_FOLLOW if follows else FORMAT,
            "default": self.default,
            "types": dict(self.types),
            "layers": dict(self.layers),
            "loss_scale": self.loss_scale.to_dict(),
            "batch_size": self.batch_size,
            "lr_rule": self.lr_rule,
            "base_batch_size": self.base_batch_size,
            "jit_compile": self.jit_compile,
            "manifest": self.manifest,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Policy:
        """Build a policy from its JSON form; any problem is a :class:`UserInputError`."""
        if not isinstance(data, dict):
            raise bad_field("(top level)", data, "a JSON object")
        if data.get("format") not in FORMATS:
            raise bad_field("format", data.get("format"), " or ".join(map(repr, FORMATS)))
        known = set(cls.__dataclass_fields__) | {"format"}
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            raise bad_field(unknown[0], data[unknown[0]], "no such field (a typo?)")
        scale = data.get("loss_scale", {})
        if not isinstance(scale, dict):
            raise bad_field("loss_scale", scale, "an object")
        bad_keys = sorted(str(key) for key in scale if key not in LossScale.__dataclass_fields__)
        if bad_keys:
            raise bad_field(f"loss_scale.{bad_keys[0]}", scale[bad_keys[0]], "no such field")
        kwargs = {key: data[key] for key in cls.__dataclass_fields__ if key in data}
        kwargs["loss_scale"] = LossScale(**scale)
        return cls(**kwargs)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the policy as JSON (atomically: a reader never sees half a file)."""
        return write_text_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read a policy file written by :meth:`Policy.save` or by a precsearch study.

    Raises:
        UserInputError: The file is missing or unreadable, not JSON, of another format
            version, or any field is invalid; the message names the file and the field.
    """
    path = Path(path)
    text = read_user_file(path, "policy file")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UserInputError(f"{path}: not a JSON policy file ({exc})") from None
    try:
        return Policy.from_dict(data)
    except UserInputError as exc:
        raise UserInputError(f"{path}: {exc}") from None
