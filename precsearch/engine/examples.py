"""The model file's examples, on any backend: one stream every trial shares.

``train_data()`` returns ``(x, y)`` arrays (``x`` and ``y`` each an array, a list or a
dict of them; ``(x, y, sample_weight)`` too), a Python iterable of unbatched ``(x, y)``
examples, or an unbatched ``tf.data.Dataset``. On TensorFlow the examples stay a
``tf.data`` pipeline (:class:`DatasetExamples`); on JAX and PyTorch they are numpy arrays
(:class:`ArrayExamples`), a ``tf.data.Dataset`` read into them once where TensorFlow is
installed. Both make the same kind of stream: shuffled with a seed, repeated before it is
cut into batches (so a batch-size change alters only how it is cut), batches of equal
size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from precsearch.errors import UserInputError, users_fault

__all__ = ["ArrayExamples", "DatasetExamples", "is_dataset", "read_examples"]

EXPECTED = "expected (x, y) arrays, an iterable of (x, y) examples or an unbatched tf.data.Dataset"


def is_dataset(data: Any) -> bool:
    """Whether ``data`` is a ``tf.data.Dataset`` (told without importing TensorFlow)."""
    return any(
        c.__module__.startswith("tensorflow") and c.__name__.startswith("DatasetV")
        for c in type(data).__mro__
    )


class ArrayExamples:
    """Examples as a structure of numpy arrays whose first axis is the example.

    Attributes:
        data: ``(x, y)`` or ``(x, y, sample_weight)``.
        n: How many examples.
    """

    def __init__(self, data: tuple[Any, ...]) -> None:
        import keras
        import numpy as np

        self.data = keras.tree.map_structure(np.asarray, tuple(data))
        sizes = {len(a) for a in keras.tree.flatten(self.data)}
        if len(sizes) != 1:
            raise ValueError(f"first dimensions differ: {sorted(sizes)}")
        self.n = sizes.pop()

    def take(self, index: Any) -> tuple[Any, ...]:
        """The examples at ``index`` (a slice or an array of positions)."""
        import keras

        return keras.tree.map_structure(lambda a: a[index], self.data)

    def first(self, size: int) -> tuple[Any, Any]:
        x, y = self.take(slice(0, size))[:2]
        return x, y

    def stream(self, batch_size: int, seed: int) -> Iterator[tuple[Any, ...]]:
        """Batches forever: each pass over the examples in a new seeded order, passes
        joined before cutting, the last partial batch of the stream never made."""
        import numpy as np

        rng = np.random.default_rng(seed)
        order = np.empty(0, dtype=np.int64)
        while True:
            while len(order) < batch_size:
                order = np.concatenate([order, rng.permutation(self.n)])
            batch, order = order[:batch_size], order[batch_size:]
            yield self.take(batch)

    def fit_arguments(self, batch_size: int) -> dict[str, Any]:
        """``model.fit``/``evaluate`` arguments for these examples at ``batch_size``."""
        names = ("x", "y", "sample_weight")
        return {**dict(zip(names, self.data, strict=False)), "batch_size": batch_size}


class DatasetExamples:
    """Examples as an unbatched ``tf.data.Dataset`` (TensorFlow's pipeline, prefetched)."""

    def __init__(self, dataset: Any, n: int) -> None:
        self.dataset = dataset
        self.n = n

    def first(self, size: int) -> tuple[Any, Any]:
        batch = next(iter(self.dataset.batch(size)))
        return batch[0], batch[1]

    def stream(self, batch_size: int, seed: int) -> Any:
        import tensorflow as tf

        return (
            self.dataset.cache()
            .shuffle(min(self.n, 50_000), seed=seed, reshuffle_each_iteration=True)
            .repeat()
            .batch(batch_size, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE)
        )

    def fit_arguments(self, batch_size: int) -> dict[str, Any]:
        import tensorflow as tf

        return {"x": self.dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)}


def read_examples(
    data: Any, where: str, as_dataset: bool, tensorflow: Callable[[], Any]
) -> ArrayExamples | DatasetExamples:
    """The examples a model file's data function returned.

    Args:
        data: What it returned.
        where: ``file: function()``, for messages.
        as_dataset: Keep them a ``tf.data`` pipeline (the TensorFlow backend).
        tensorflow: Imports TensorFlow, or raises the one line saying it is missing.

    Raises:
        UserInputError: Not examples, arrays that do not line up, a dataset that repeats
            forever or holds nothing, a dataset where TensorFlow is not installed.
    """

    def misaligned(cause: str) -> str:
        return f"{where} returned arrays that do not line up ({cause})"

    if is_dataset(data):
        examples = _dataset(data, where, tensorflow)
        if not as_dataset:
            examples = ArrayExamples(_read_whole(examples))
    elif isinstance(data, (tuple, list)) and len(data) in (2, 3):
        with users_fault(misaligned):
            examples = ArrayExamples(tuple(data))
    elif hasattr(data, "__iter__") and not isinstance(data, (str, bytes, dict)):
        examples = ArrayExamples(_stack(data, where))
    else:
        raise UserInputError(f"{where} returned {type(data).__name__}, {EXPECTED}")
    if examples.n < 1:
        raise UserInputError(f"{where} returned no examples")
    if as_dataset and isinstance(examples, ArrayExamples):
        tf = tensorflow()
        with users_fault(misaligned):
            dataset = tf.data.Dataset.from_tensor_slices(examples.data)
        examples = DatasetExamples(dataset, examples.n)
    return examples


def _dataset(data: Any, where: str, tensorflow: Callable[[], Any]) -> DatasetExamples:
    try:
        tf = tensorflow()
    except UserInputError:
        raise UserInputError(
            f"{where} returned a tf.data.Dataset, which needs TensorFlow, not installed "
            "here: return (x, y) arrays instead (they work on every backend)"
        ) from None
    n = int(data.cardinality())
    if n == tf.data.INFINITE_CARDINALITY:
        raise UserInputError(
            f"{where} returned a dataset that repeats forever, "
            "expected a finite one (precsearch repeats it itself)"
        )
    if n == tf.data.UNKNOWN_CARDINALITY:
        n = int(data.reduce(0, lambda count, _: count + 1))
    return DatasetExamples(data, n)


def _read_whole(examples: DatasetExamples) -> tuple[Any, ...]:
    """A finite dataset's examples as arrays, read once."""
    return tuple(next(examples.dataset.batch(max(examples.n, 1)).as_numpy_iterator()))


def _stack(items: Any, where: str) -> tuple[Any, ...]:
    """Unbatched ``(x, y)`` examples from an iterable, stacked into arrays."""
    import keras
    import numpy as np

    examples = list(items)
    if not examples:
        raise UserInputError(f"{where} returned no examples")
    with users_fault(lambda cause: f"{where} yielded examples that do not stack ({cause})"):
        if not isinstance(examples[0], (tuple, list)) or len(examples[0]) not in (2, 3):
            raise ValueError(f"each example must be (x, y), got {type(examples[0]).__name__}")
        flat = [keras.tree.flatten(tuple(e)) for e in examples]
        stacked = [np.stack(leaves) for leaves in zip(*flat, strict=True)]
        return tuple(keras.tree.pack_sequence_as(tuple(examples[0]), stacked))
