"""Walking a Keras model: every nested layer once, with the id precsearch gives it.

A layer's id is the names from the model root joined by ``/`` (Keras's own
``layer.path`` is not reliable for this); the output layers are found by following the
model's output tensors back. Keras is imported inside the functions that need it.

Each layer also gets a *kind*, which says whether its dtype is worth a choice:

- ``compute``: it does the arithmetic low precision speeds up (Dense, EinsumDense,
  Conv*, DepthwiseConv*, attention, recurrent layers, Embedding; a custom layer that
  holds one, or that has weights of its own).
- ``follow``: shape and element-wise layers (activations, merging, pooling, reshaping,
  dropout) and normalisation, whose statistics Keras computes in float32 whatever the
  policy (BatchNormalization and LayerNormalization upcast float16/bfloat16 inputs): their
  dtype only moves casts, so the cast-aware space lets them take their input's dtype.
- ``sensitive``: softmax outputs, kept float32 unless a user opts in.
- ``preprocess``: Keras preprocessing and augmentation layers (Rescaling, Normalization,
  RandomFlip, ...), which run on the input and get no choice.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "LayerRecord", "iter_layers", "model_layers", "output_layers", "scalar"]

KINDS = ("compute", "follow", "sensitive", "preprocess")
# Keras's own layer packages (keras.src.layers.<package>) whose layers compute nothing
# worth a dtype of their own.
_FOLLOW_PACKAGES = ("activations", "merging", "pooling", "reshaping", "regularization",
                    "normalization")  # fmt: skip
_FOLLOW_CLASSES = ("Identity", "Masking", "Lambda")
_SOFTMAX = ("softmax", "log_softmax")


def scalar(value: Any) -> float:
    """A model's scalar (loss scale, learning rate) as a float: also one held in a
    variable mirrored across replicas (``float()`` refuses those)."""
    import numpy as np

    return float(np.asarray(value))


@dataclass(frozen=True)
class LayerRecord:
    """One layer of a model as precsearch sees it.

    Attributes:
        id: Names from the model root joined by ``/`` (the root's own name excluded).
        name: The layer's own name.
        class_name: Its class, e.g. ``"Dense"``.
        is_output: Whether it produces a model output (kept float32 unless named).
        is_model: Whether it is a nested ``keras.Model`` (a container that computes
            nothing itself, so its own dtype policy is left alone).
        floating: Whether it computes in a floating dtype (lookups and the like do not).
        unit: The id of the outermost layer (not a model) that holds this one, if any.
            Such a layer combines its sublayers' outputs in code no policy can see (a
            ``PatchEncoder`` adding a Dense projection to an Embedding lookup), so
            everything inside it takes the dtype decided for it.
        kind: One of :data:`KINDS` (see the module doc).
        inputs: The ids of the layers whose outputs it takes (through plain ops and out
            of nested models); empty for one fed by the model's inputs, or when the
            model's call order is invisible (subclassed models).
    """

    id: str
    name: str
    class_name: str
    is_output: bool
    is_model: bool
    floating: bool
    unit: str | None = None
    kind: str = "compute"
    inputs: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, layer: dict[str, Any]) -> LayerRecord:
        """The record of one layer of ``model_info.json`` (:func:`model_layers`); files
        written before kinds existed read as ``compute`` with unknown inputs."""
        return cls(
            id=layer["id"],
            name=layer["name"],
            class_name=layer["class"],
            is_output=layer["output"],
            is_model=layer["container"],
            floating=layer["floating"],
            unit=layer.get("unit"),
            kind=layer.get("kind", "compute"),
            inputs=tuple(layer.get("inputs", ())),
        )


def _children(layer: Any) -> list[Any]:
    # Keras 3 tracks sub-layers in `_layers` (attributes, lists, Functional graphs);
    # `_flatten_layers` is the walk Keras itself uses for weights and serialisation.
    return [
        child
        for child in layer._flatten_layers(include_self=False, recursive=False)
        if type(child).__name__ != "InputLayer"
    ]


def _walk(model: Any) -> Iterator[tuple[str, Any, str | None]]:
    """``(id, layer, unit)`` depth first; ``unit`` as in :class:`LayerRecord`."""
    import keras

    seen: set[int] = {id(model)}
    stack: list[tuple[str, Any, str | None]] = [
        (child.name, child, None) for child in reversed(_children(model))
    ]
    while stack:
        layer_id, layer, unit = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        yield layer_id, layer, unit
        children = _children(layer)
        if unit is None and children and not isinstance(layer, keras.Model):
            inner_unit = layer_id
        else:
            inner_unit = unit
        for child in reversed(children):
            stack.append((f"{layer_id}/{child.name}", child, inner_unit))


def output_layers(model: Any) -> set[int]:
    """The Python ids of the layers that produce the model's outputs.

    Functional models follow their output tensors back to the producing layer (through
    plain ops and into nested models); Sequential models take their last layer;
    subclassed models, whose call order is invisible, take their last tracked layer.
    """
    import keras

    found: set[int] = set()

    def from_model(m: Any) -> None:
        if isinstance(m, keras.Sequential):
            layers = m.layers
            if layers:
                from_layer(layers[-1])
            return
        outputs = getattr(m, "outputs", None) if _is_functional(m) else None
        if outputs:
            for tensor in keras.tree.flatten(outputs):
                from_tensor(tensor, depth=0)
            return
        children = _children(m)
        if children:
            from_layer(children[-1])

    def from_layer(layer: Any) -> None:
        if isinstance(layer, keras.Model):
            from_model(layer)
        else:
            found.add(id(layer))

    def from_tensor(tensor: Any, depth: int) -> None:
        history = getattr(tensor, "_keras_history", None)
        if history is None or depth > 50:
            return
        operation = history[0]
        if isinstance(operation, keras.layers.Layer):
            from_layer(operation)
            return
        # A plain op (keras.ops.add in a functional graph): look through to its inputs.
        nodes = getattr(operation, "_inbound_nodes", [])
        if len(nodes) > history[1]:
            for parent in nodes[history[1]].input_tensors:
                from_tensor(parent, depth + 1)

    from_model(model)
    return found


def _is_functional(model: Any) -> bool:
    return type(model).__name__ == "Functional" or hasattr(model, "_operations")


def _kind(layer: Any) -> str:
    """The layer's kind (module doc): by Keras's package for Keras's own layers, by
    what it holds for anyone else's."""
    cls = type(layer)
    parts = cls.__module__.split(".")
    activation = getattr(getattr(layer, "activation", None), "__name__", "")
    if cls.__name__ == "Softmax" or (cls.__name__ == "Activation" and activation in _SOFTMAX):
        return "sensitive"
    if parts[:2] == ["keras", "src"]:
        package = parts[3] if len(parts) > 3 and parts[2] == "layers" else ""
        if package == "preprocessing":
            return "preprocess"
        if package in _FOLLOW_PACKAGES or cls.__name__ in _FOLLOW_CLASSES:
            return "follow"
        return "compute"
    children = _children(layer)
    if children:
        return "compute" if any(_kind(c) == "compute" for c in children) else "follow"
    return "compute" if layer.weights else "follow"


def _producers(layer: Any, outputs_of: Any) -> list[Any]:
    """The layers whose outputs ``layer`` takes in the model graph (a nested model
    stands for its output layers, via ``outputs_of``)."""
    import keras

    found: list[Any] = []

    def from_tensor(tensor: Any, depth: int) -> None:
        history = getattr(tensor, "_keras_history", None)
        if history is None or depth > 50:
            return
        operation = history[0]
        if type(operation).__name__ == "InputLayer":
            return
        if isinstance(operation, keras.Model):
            found.extend(outputs_of(operation))
            return
        if isinstance(operation, keras.layers.Layer):
            found.append(operation)
            return
        nodes = getattr(operation, "_inbound_nodes", [])
        if len(nodes) > history[1]:
            for parent in nodes[history[1]].input_tensors:
                from_tensor(parent, depth + 1)

    for node in getattr(layer, "_inbound_nodes", []):
        for tensor in node.input_tensors:
            from_tensor(tensor, 0)
    return found


def iter_layers(model: Any) -> list[tuple[LayerRecord, Any]]:
    """Every nested layer of ``model`` (depth first, each once) with its record.

    Input layers and the root model itself are left out.
    """
    import keras

    outputs = output_layers(model)
    walked = list(_walk(model))
    ids = {id(layer): layer_id for layer_id, layer, _ in walked}
    # Sequential models feed each layer the one before it.
    previous: dict[int, Any] = {}
    for container in [model, *(layer for _, layer, _ in walked)]:
        if isinstance(container, keras.Sequential):
            layers = container.layers
            previous.update({id(b): a for a, b in zip(layers, layers[1:], strict=False)})

    def outputs_of(nested: Any) -> list[Any]:
        return [layer for _, layer, _ in walked if id(layer) in output_layers(nested)]

    records = []
    for layer_id, layer, unit in walked:
        policy = layer.dtype_policy
        floating = (
            getattr(policy, "quantization_mode", None) is None
            and policy.compute_dtype is not None
            and keras.backend.is_float_dtype(policy.compute_dtype)
        )
        if id(layer) in previous:
            before = previous[id(layer)]
            producers = outputs_of(before) if isinstance(before, keras.Model) else [before]
        else:
            producers = _producers(layer, outputs_of)
        inputs = tuple(dict.fromkeys(ids[id(p)] for p in producers if id(p) in ids))
        record = LayerRecord(
            id=layer_id,
            name=layer.name,
            class_name=type(layer).__name__,
            is_output=id(layer) in outputs,
            is_model=isinstance(layer, keras.Model),
            floating=floating,
            unit=unit,
            kind=_kind(layer),
            inputs=inputs,
        )
        records.append((record, layer))
    return records


def model_layers(model: Any) -> list[dict[str, Any]]:
    """Every nested layer of a built model as the JSON records of ``model_info.json``."""
    return [
        {
            "id": record.id,
            "name": record.name,
            "class": record.class_name,
            "params": int(sum(int(math.prod(w.shape)) for w in layer.weights)),
            "output": record.is_output,
            "container": record.is_model,
            "floating": record.floating,
            "unit": record.unit,
            "kind": record.kind,
            "inputs": list(record.inputs),
        }
        for record, layer in iter_layers(model)
    ]
