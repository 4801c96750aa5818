"""What is searched: the model (its spec and description) and the options of the space."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from precsearch.errors import UserInputError
from precsearch.records._json import known_fields

__all__ = [
    "GROUP_BY",
    "LR_RULES",
    "SHORT_DTYPES",
    "ModelInfo",
    "ModelSpec",
    "SpaceOptions",
    "parse_dtypes",
]

SHORT_DTYPES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
GROUP_BY = ("global", "type", "block", "layer")
LR_RULES = ("none", "linear", "sqrt")


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
class ModelSpec:
    """Where a model and its data come from (what a loader returns).

    Attributes:
        source: The model file's path, or a description of the callables.
        config: ``precsearch_config`` of the file (empty for callables).
        build_model: Returns a new ``keras.Model`` on each call.
        train_data: Returns unbatched training examples.
        val_data: Optional; returns unbatched validation examples.
        compile_kwargs: Optional; returns fresh ``model.compile`` arguments.
        fingerprint: A hash of the file's text (or of the callables' code and data), so
            cached references notice an edit; empty when none could be taken.
    """

    source: str
    config: dict[str, Any] = field(default_factory=dict)
    build_model: Callable[[], Any] | None = None
    train_data: Callable[[], Any] | None = None
    val_data: Callable[[], Any] | None = None
    compile_kwargs: Callable[[], dict[str, Any]] | None = None
    fingerprint: str = ""


@dataclass
class ModelInfo:
    """What the inspection of a model found (``model_info.json``); no TensorFlow needed.

    Attributes:
        layers: One JSON record per nested layer: ``id``, ``name``, ``class``,
            ``params``, ``output``, ``container``, ``floating``.
        output_layers: Ids of the layers that produce model outputs.
        batch_size: The model's own batch size.
        train_examples, val_examples: How many examples the data functions return.
        jit_compile: Whether the user's training compiles with XLA (Keras's ``"auto"``
            resolved on this machine).
        steps_per_execution: The user's steps per train-function call.
        replicas: Data-parallel replicas every model trains on (``--strategy``).
        versions: TensorFlow and Keras versions.
        gpus: ``{name, compute_capability}`` per visible GPU.
        dropped_compile_args: The user's compile arguments precsearch does not keep
            (``run_eagerly``: steps are traced and timed as graphs).
    """

    source: str
    fingerprint: str
    model_name: str
    model_class: str
    params: int
    layers: list[dict[str, Any]]
    output_layers: list[str]
    batch_size: int
    train_examples: int
    val_examples: int = 0
    jit_compile: bool = False
    steps_per_execution: int = 1
    replicas: int = 1
    versions: dict[str, str] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    dropped_compile_args: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, which is also what dimension plugins receive as ``info``."""
        return {"record": "precsearch.model_info/1", **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        return cls(**known_fields(cls, data))


@dataclass
class SpaceOptions:
    """Choices that shape a search space.

    Args:
        group_by: ``global`` (one dtype), ``type`` (one per layer class), ``block``
            (one per layer-name prefix such as ``block_3``) or ``layer``.
        dtypes: Short dtype names to offer, float32 first; ``None`` offers float32 plus
            what this hardware runs fast (see :mod:`precsearch.hardware`).
        include_output: Search the output layer's dtype too (default: keep float32).
        lr_rule: How the learning rate follows the batch size.
        batch_sizes: Candidate batch sizes; ``None`` picks some around the model's own.
        notes: What the space wants a person to know (filled while it is built).
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
