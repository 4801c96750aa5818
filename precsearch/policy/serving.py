"""The SavedModel a study exports, with a serving signature a TF Serving client can read.

Keras's own ``model.export`` names the signature's input ``keras_tensor`` and its output
``output_0``: a client has to discover those generated names. Here the inputs take the
names of the model's input layers and the outputs the names of its output layers, and
:func:`output_kinds` says what each output holds (probabilities, logits or plain values),
read from the output layer's activation and the loss the model was compiled with.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from precsearch.policy.layers import _is_functional, output_layers

__all__ = ["SIGNATURE", "export_saved_model", "output_kinds", "serving_names"]

SIGNATURE = "serving_default"
_PROBABILITIES = {"softmax", "sigmoid"}


def serving_names(model: Any) -> tuple[list[str], list[str]] | None:
    """The signature's input and output names: the model's input and output layer names.

    None for a model whose inputs Keras does not record (a subclassed model): its
    signature keeps the names Keras generates.
    """
    import keras

    graph = _graph(model)
    if graph is None:
        return None
    inputs = [t._keras_history[0].name for t in keras.tree.flatten(graph.inputs)]
    outputs = list(getattr(graph, "output_names", None) or [])
    if len(outputs) != len(keras.tree.flatten(graph.outputs)):
        outputs = [f"output_{i}" for i in range(len(keras.tree.flatten(graph.outputs)))]
    if len(set(inputs)) != len(inputs) or len(set(outputs)) != len(outputs):
        return None
    return inputs, outputs


def _graph(model: Any) -> Any:
    """The functional graph behind ``model`` (a built Sequential's own), else None."""
    import keras

    if isinstance(model, keras.Sequential):
        model = getattr(model, "_functional", None)
    if model is None or not _is_functional(model) or not getattr(model, "inputs", None):
        return None
    return model


def output_kinds(model: Any, loss: Any = None) -> dict[str, str]:
    """What each output holds, by output layer name: ``probabilities (softmax)``,
    ``logits`` (no activation, and the loss says ``from_logits``) or ``values (no output
    activation)``.

    Args:
        model: A built Keras model.
        loss: The loss the model was compiled with (an object with ``from_logits``, or
            anything else), to tell logits from plain values.
    """
    import keras

    ids = output_layers(model)
    kinds = {}
    for layer in _all_layers(model):
        if id(layer) not in ids:
            continue
        if isinstance(layer, keras.layers.Softmax):
            activation = "softmax"
        else:
            function = getattr(layer, "activation", None)
            activation = getattr(function, "__name__", None) or "linear"
        if activation in _PROBABILITIES:
            kinds[layer.name] = f"probabilities ({activation})"
        elif activation == "log_softmax":
            kinds[layer.name] = "log-probabilities (log_softmax)"
        elif activation == "linear" and getattr(loss, "from_logits", False):
            kinds[layer.name] = "logits"
        elif activation == "linear":
            kinds[layer.name] = "values (no output activation)"
        else:
            kinds[layer.name] = f"values ({activation})"
    return kinds


def _all_layers(model: Any) -> list[Any]:
    found, stack = [], [model]
    while stack:
        layer = stack.pop()
        found.append(layer)
        stack.extend(getattr(layer, "layers", None) or [])
    return found


def export_model(model: Any, directory: Path) -> Path:
    """The model written where serving reads it: ``saved_model/`` where Keras can write a
    SavedModel (TensorFlow, and JAX through jax2tf, with TensorFlow installed), else
    ``model.keras``, Keras's own file, which every backend loads. The path says which."""
    from precsearch.backend import current, tensorflow_if_installed

    if current().name in ("tensorflow", "jax") and tensorflow_if_installed() is not None:
        return export_saved_model(model, Path(directory) / "saved_model")
    path = Path(directory) / "model.keras"
    model.save(path)
    return path


def export_saved_model(model: Any, path: Path) -> Path:
    """Write ``model`` as a SavedModel at ``path`` (whole or not at all).

    Its ``serving_default`` signature (TF Serving's) takes the model's inputs by input
    layer name and returns a dict of outputs by output layer name; ``serve`` is Keras's
    endpoint as ``model.export`` writes it (``loaded.serve(x)`` returns the output).
    Floating outputs are float32 in both.
    """
    import keras
    import tensorflow as tf

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    names = serving_names(model)
    if names is None:
        model.export(str(tmp), verbose=False)
    else:
        input_names, output_names = names
        graph = _graph(model)
        tensors = keras.tree.flatten(graph.inputs)
        specs = [
            tf.TensorSpec((None, *t.shape[1:]), t.dtype, name=name)
            for t, name in zip(tensors, input_names, strict=True)
        ]

        def call(*args: Any) -> list[Any]:
            inputs = keras.tree.pack_sequence_as(graph._inputs_struct, list(args))
            outputs = keras.tree.flatten(model(inputs, training=False))
            return [
                keras.ops.cast(y, "float32")
                if "float" in keras.backend.standardize_dtype(y.dtype)
                else y
                for y in outputs
            ]

        def serve(*args: Any) -> Any:  # Keras's own endpoint: what model.export writes
            outputs = call(*args)
            return outputs[0] if len(outputs) == 1 else outputs

        def named(*args: Any) -> dict[str, Any]:
            return dict(zip(output_names, call(*args), strict=True))

        archive = keras.export.ExportArchive()
        archive.track(model)
        archive.add_endpoint("serve", serve, input_signature=specs)
        archive.add_endpoint(SIGNATURE, named, input_signature=specs)
        archive.write_out(str(tmp), verbose=False)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    return path
