"""The messages between the study process and its worker: one dataclass per command and
one per reply, JSON both ways (never pickle).

A command's JSON form carries its ``"cmd"`` tag (:func:`read_command` turns a line back
into the command it names); each command knows the class of its reply
(:meth:`Command.read_reply`), and any command may instead be answered by an
:class:`ErrorReply`. The worker's side dispatches a command by its type
(``precsearch.engine.serve.HANDLERS``), and the in-process executor hands it the same
objects, so adding a command is one command class, one reply class and one handler.

A policy travels as its JSON form (``Policy.to_dict()``), as in a
:class:`~precsearch.records.TrialResult`: the records sit below :mod:`precsearch.policy`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, ClassVar, Generic, TypeVar

from precsearch.errors import PrecsearchError
from precsearch.records._json import json_safe, known_fields
from precsearch.records.decisions import Measurement
from precsearch.records.model import ModelInfo
from precsearch.records.results import Budget, Fidelity, TrialResult

__all__ = [
    "COMMANDS",
    "Command",
    "ConfirmCommand",
    "ConfirmReply",
    "ErrorReply",
    "ExportCommand",
    "ExportReply",
    "InitCommand",
    "InitReply",
    "NumericsCommand",
    "NumericsReply",
    "Reply",
    "TrialCommand",
    "TrialReply",
    "read_command",
]

PolicyJSON = dict[str, Any]  # a Policy's JSON form

_M = TypeVar("_M", bound="_Message")


class _Message:
    """JSON both ways: field names are the keys; a field named in ``_records`` holds a
    record, written and read with its own ``to_dict``/``from_dict``."""

    _records: ClassVar[dict[str, Any]] = {}

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        data = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name in self._records and value is not None:
                value = value.to_dict()
            data[f.name] = value
        return json_safe(data)

    @classmethod
    def from_dict(cls: type[_M], data: dict[str, Any]) -> _M:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        values = known_fields(cls, data)
        for name, record in cls._records.items():
            if values.get(name) is not None:
                values[name] = record.from_dict(values[name])
        return cls(**values)

    def to_line(self) -> str:
        """One line of JSON (no ``NaN``: JSON has none), newline included."""
        return json.dumps(self.to_dict(), allow_nan=False) + "\n"


class Reply(_Message):
    """The answer to a command that succeeded."""


@dataclass(frozen=True)
class ErrorReply(_Message):
    """The answer to a command that failed.

    Attributes:
        error: ``"user_input"`` (the model file is broken: every trial would fail alike)
            or ``"failed"`` (this command only).
        message: What happened, in one line.
    """

    error: str
    message: str

    @property
    def user_input(self) -> bool:
        """Whether the user's input is at fault (the study stops)."""
        return self.error == "user_input"


_R = TypeVar("_R", bound=Reply)
_COMMANDS: dict[str, type[Command[Any]]] = {}
COMMANDS: Mapping[str, type[Command[Any]]] = MappingProxyType(_COMMANDS)  # by tag


class Command(_Message, Generic[_R]):
    """A command to the worker; a subclass names its ``cmd`` tag and its ``reply`` class
    (and is known by its tag from then on)."""

    cmd: ClassVar[str]
    reply: ClassVar[type[Reply]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.cmd in _COMMANDS:
            raise TypeError(f"{cls.__name__}: command {cls.cmd!r} is {_COMMANDS[cls.cmd]}'s")
        _COMMANDS[cls.cmd] = cls

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, with the ``"cmd"`` tag."""
        return {"cmd": self.cmd, **super().to_dict()}

    def read_reply(self, line: str | bytes) -> _R | ErrorReply:
        """The reply to this command from its JSON line."""
        data = json.loads(line)
        if "error" in data:
            return ErrorReply.from_dict(data)
        return self.reply.from_dict(data)  # type: ignore[return-value]


def read_command(line: str) -> Command[Any]:
    """The command a JSON line names.

    Raises:
        PrecsearchError: The line is not JSON, not a command, or names no known command.
    """
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PrecsearchError(f"not a JSON command ({exc})") from None
    if not isinstance(data, dict) or "cmd" not in data:
        raise PrecsearchError(f"not a command: {line.strip()[:80]!r}")
    tag = data["cmd"]
    kind = _COMMANDS.get(tag) if isinstance(tag, str) else None
    if kind is None:
        raise PrecsearchError(f"unknown command {tag!r} (expected {', '.join(_COMMANDS)})")
    try:
        return kind.from_dict(data)
    except TypeError as exc:  # a field missing
        raise PrecsearchError(f"the {tag} command does not fit: {exc}") from None


def _pairs(configs: list[Any]) -> list[tuple[str, Any]]:
    """``(label, policy)`` pairs (JSON has lists only)."""
    return [(label, policy) for label, policy in configs]


@dataclass(frozen=True)
class InitReply(Reply):
    """The worker is ready: seconds importing TensorFlow and building the model."""

    import_s: float
    setup_s: float
    model_info: ModelInfo
    _records: ClassVar[dict[str, Any]] = {"model_info": ModelInfo}


@dataclass(frozen=True)
class InitCommand(Command[InitReply]):
    """Load the model file and build what every later command runs on (a Runner)."""

    cmd: ClassVar[str] = "init"
    reply: ClassVar[type[Reply]] = InitReply
    model_file: str
    loader: str
    work_dir: str
    budget: Budget
    fidelity: Fidelity
    batch_size: int | None = None
    strategy: str = "none"
    _records: ClassVar[dict[str, Any]] = {"budget": Budget, "fidelity": Fidelity}


@dataclass(frozen=True)
class TrialReply(Reply):
    """What the trial measured (``failed`` for a crash inside it)."""

    result: TrialResult
    _records: ClassVar[dict[str, Any]] = {"result": TrialResult}


@dataclass(frozen=True)
class TrialCommand(Command[TrialReply]):
    """One trial: ``policy`` (``None`` with a ``peer``) under ``budget`` (``None``: the
    worker's own)."""

    cmd: ClassVar[str] = "trial"
    reply: ClassVar[type[Reply]] = TrialReply
    policy: PolicyJSON | None
    budget: Budget | None = None
    peer: str | None = None
    _records: ClassVar[dict[str, Any]] = {"budget": Budget}


@dataclass(frozen=True)
class ConfirmReply(Reply):
    """The rounds' figures."""

    measurement: Measurement
    _records: ClassVar[dict[str, Any]] = {"measurement": Measurement}


@dataclass(frozen=True)
class ConfirmCommand(Command[ConfirmReply]):
    """Timed rounds of labelled configurations (the policy ``None``: the graph rewrite),
    in the given orders, each block at least ``block`` calls."""

    cmd: ClassVar[str] = "confirm"
    reply: ClassVar[type[Reply]] = ConfirmReply
    configs: list[tuple[str, PolicyJSON | None]]
    orders: list[list[str]]
    block: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _pairs(self.configs))


@dataclass(frozen=True)
class NumericsReply(Reply):
    """Per label: the policy's numbers on one batch against FP32's."""

    by_label: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class NumericsCommand(Command[NumericsReply]):
    """One batch through each labelled policy and through FP32."""

    cmd: ClassVar[str] = "numerics"
    reply: ClassVar[type[Reply]] = NumericsReply
    configs: list[tuple[str, PolicyJSON]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _pairs(self.configs))


@dataclass(frozen=True)
class ExportReply(Reply):
    """What the exporters wrote, after training ``steps`` calls to ``final_loss``."""

    paths: list[str]
    steps: int
    final_loss: float


@dataclass(frozen=True)
class ExportCommand(Command[ExportReply]):
    """Train under ``policy`` for the budget and run model exporters on the result."""

    cmd: ClassVar[str] = "export"
    reply: ClassVar[type[Reply]] = ExportReply
    policy: PolicyJSON
    exporters: list[str]
    directory: str
