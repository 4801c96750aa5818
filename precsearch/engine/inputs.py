"""What a model's inputs carry that a low dtype cannot hold.

Token ids fed through a float ``Input`` (as public Keras examples do: ``Input(shape=(maxlen,))``
and ``Embedding`` after it) are exact in float32 up to 2**24, in float16 only up to 2048
and in bfloat16 up to 256: a layer that computes in a low dtype casts its float input
first, and an id of 1999 becomes 2000. The model's description records such inputs
(:attr:`precsearch.records.ModelInfo.integer_inputs`) so that the search can say why a
layer fed by them breaks, and warn before it does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["integer_inputs"]


def integer_inputs(x: Any, model_inputs: list[Any] | None) -> dict[str, float]:
    """Float inputs of ``x`` (a batch: an array, a list or a dict of them) whose values
    are all integers above 1, with their largest absolute value, by input name."""
    import keras
    import numpy as np

    if isinstance(x, dict):
        items = [(str(name), value) for name, value in x.items()]
    else:
        flat = keras.tree.flatten(x)
        # A functional Input's generated name ("keras_tensor_3") tells a user nothing.
        names = [getattr(t, "name", "") for t in model_inputs or []]
        generated = any(name.startswith("keras_tensor") for name in names)
        if len(names) != len(flat) or not all(names) or generated:
            names = [f"input {i}" if len(flat) > 1 else "the input" for i in range(len(flat))]
        items = list(zip(names, flat, strict=True))
    found = {}
    for name, value in items:
        array = np.asarray(value)
        if array.dtype.kind != "f" or array.size == 0 or not np.isfinite(array).all():
            continue
        top = float(np.max(np.abs(array)))
        if top > 1 and bool(np.all(array == np.round(array))):
            found[name] = top
    return found
