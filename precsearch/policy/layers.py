"""Walking a Keras model: every nested layer once, with the id precsearch gives it.

A layer's id is the names from the model root joined by ``/`` (Keras's own
``layer.path`` is not reliable for this); the output layers are found by following the
model's output tensors back. Keras is imported inside the functions that need it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["LayerRecord", "iter_layers", "model_layers", "output_layers", "scalar"]


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
    """

    id: str
    name: str
    class_name: str
    is_output: bool
    is_model: bool
    floating: bool
    unit: str | None = None


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


def iter_layers(model: Any) -> list[tuple[LayerRecord, Any]]:
    """Every nested layer of ``model`` (depth first, each once) with its record.

    Input layers and the root model itself are left out.
    """
    import keras

    outputs = output_layers(model)
    records = []
    for layer_id, layer, unit in _walk(model):
        policy = layer.dtype_policy
        floating = (
            getattr(policy, "quantization_mode", None) is None
            and policy.compute_dtype is not None
            and keras.backend.is_float_dtype(policy.compute_dtype)
        )
        record = LayerRecord(
            id=layer_id,
            name=layer.name,
            class_name=type(layer).__name__,
            is_output=id(layer) in outputs,
            is_model=isinstance(layer, keras.Model),
            floating=floating,
            unit=unit,
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
        }
        for record, layer in iter_layers(model)
    ]
