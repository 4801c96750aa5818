"""What is searched: the model (its spec and description) and the options of the space."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from precsearch.errors import UserInputError
from precsearch.records._json import known_fields

__all__ = [
    "CASTS",
    "GROUP_BY",
    "LR_RULES",
    "EXACT_INTEGERS",
    "SHORT_DTYPES",
    "resolve_lr_rule",
    "ModelInfo",
    "ModelSpec",
    "SpaceOptions",
    "parse_dtypes",
]

SHORT_DTYPES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
# The largest integer each low dtype holds exactly (and every integer below it).
EXACT_INTEGERS = {"bfloat16": 256, "float16": 2048}
GROUP_BY = ("global", "type", "block", "layer")
CASTS = ("follow", "independent")
LR_RULES = ("none", "linear", "sqrt")
# Optimizers that adapt their step per parameter: their learning rate follows the
# square root of the batch size (Malladi et al., NeurIPS 2022); plain SGD follows it
# linearly (Goyal et al., 2017).
ADAPTIVE_OPTIMIZERS = ("Adam", "AdamW", "Adamax", "Nadam", "Lion", "Adafactor", "RMSprop",
                       "Adagrad", "Adadelta", "Lamb", "Muon")  # fmt: skip


def resolve_lr_rule(rule: str, optimizer: str | None) -> tuple[str, str]:
    """``(rule, why)``: ``auto`` resolved for the user's optimizer class name."""
    if rule != "auto":
        return rule, "as asked (--lr-rule)"
    if optimizer in ADAPTIVE_OPTIMIZERS:
        return "sqrt", f"square-root scaling for {optimizer}, an adaptive optimizer"
    return "linear", f"linear scaling for {optimizer or 'an unknown optimizer'}"


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
        versions: Keras's backend (``keras_backend``: tensorflow, jax or torch), its
            framework's version and Keras's.
        gpus: ``{name, compute_capability}`` per visible GPU.
        dropped_compile_args: The user's compile arguments precsearch does not keep
            (``run_eagerly``, also set on the model itself: steps are traced and timed
            as graphs); :meth:`notes` says so.
        optimizer: The class name of the user's optimizer (for the LR rule).
        serving: The exported signature: ``inputs`` (names) and ``outputs`` (name ->
            what it holds: probabilities, logits or values); empty names where Keras
            generates them (a subclassed model).
        integer_inputs: Float inputs whose first examples are all integers (token ids fed
            through a float ``Input``): input name -> the largest absolute value. A low
            dtype holds integers exactly only up to 256 (bfloat16) or 2048 (float16).
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
    optimizer: str = ""
    serving: dict[str, Any] = field(default_factory=dict)
    integer_inputs: dict[str, float] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """What precsearch changed about the user's training, for people (the run's
        output and the policy's manifest)."""
        if "run_eagerly" in self.dropped_compile_args:
            return [
                "run_eagerly=True in your training is ignored: precsearch trains and times "
                "every step as a traced graph (eager steps are no measure of a policy's "
                "speed), so every figure here is for graph execution"
            ]
        return []

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
        casts: ``follow`` (the cast-aware space: only layers that compute get a dtype
            choice, shape and element-wise layers take their input's, softmax and
            preprocessing layers stay float32) or ``independent`` (every floating layer
            gets a choice; each choice may put a cast between two layers).
        sensitive: In the ``follow`` space, offer softmax layers a low dtype too.
        lr_rule: How the learning rate follows the batch size: ``auto`` (the rule a
            user of the model's optimizer would use: :func:`resolve_lr_rule`) or one of
            :data:`LR_RULES`.
        batch_sizes: Candidate batch sizes; ``None`` picks some around the model's own.
        notes: What the space wants a person to know (filled while it is built).
    """

    group_by: str = "type"
    dtypes: list[str] | None = None
    include_output: bool = False
    casts: str = "follow"
    sensitive: bool = False
    lr_rule: str = "auto"
    batch_sizes: list[int] | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.group_by not in GROUP_BY:
            raise UserInputError(
                f"--group-by {self.group_by!r}: expected one of {', '.join(GROUP_BY)}"
            )
        if self.casts not in CASTS:
            raise UserInputError(f"--casts {self.casts!r}: expected one of {', '.join(CASTS)}")
        if self.lr_rule not in ("auto", *LR_RULES):
            raise UserInputError(
                f"--lr-rule {self.lr_rule!r}: expected one of auto, {', '.join(LR_RULES)}"
            )
        if self.dtypes is not None:
            self.dtypes = parse_dtypes(self.dtypes)
