"""How one option of ``precsearch run`` is given on the command line: its :class:`Flag`
and the converters that read a flag's text (each raises ``ValueError`` saying what was
expected). :mod:`precsearch.study.options` declares every option with :func:`option`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FLAG",
    "NO_FLAG",
    "Flag",
    "at_least",
    "count",
    "option",
    "positive_float",
    "positive_int",
    "seconds",
]

FLAG = "precsearch.flag"
NO_FLAG = "precsearch.no_flag"


def at_least(text: str, least: int) -> int:
    """A flag's text as an integer of ``least`` or more; else ``ValueError`` saying why."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None
    if value < least:
        words = {0: "is negative", 1: "is not a positive integer"}
        raise ValueError(f"{value} {words.get(least, f'is fewer than {least}')}")
    return value


def positive_int(text: str) -> int:
    """A flag's text as an integer of 1 or more; else ``ValueError`` saying why."""
    return at_least(text, least=1)


def count(text: str) -> int:
    """A flag's text as an integer of 0 or more; else ``ValueError`` saying why."""
    return at_least(text, least=0)


def positive_float(text: str) -> float:
    """A flag's text as a number above 0 (not ``nan``); else ``ValueError`` saying why."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"{value} is not a positive number")
    return value


def seconds(text: str) -> float:
    """A flag's text as 0 (off) or more seconds; else ``ValueError`` saying why."""
    return 0.0 if text.strip() in ("0", "0.0") else positive_float(text)


@dataclass(frozen=True)
class Flag:
    """How one :class:`SearchOptions` field is given on the command line.

    :mod:`precsearch.cli.parser` makes the flags from these: the value goes to the field
    of the same name, whose default is the flag's (a default of ``False``: a switch).

    Attributes:
        name: The flag (``--confirm``).
        help: What ``--help`` says of it; ``None``: the flag alone.
        convert: Reads the text typed; raises ``ValueError`` saying what was expected.
        choices: The values it takes, where they are few.
        metavar: The value's name in ``--help`` (default: the field's name in capitals).
        repeat: Each use adds one item to a list.
    """

    name: str
    help: str | None = None
    convert: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    repeat: bool = False


def option(default: Any, flag: str, convert: Callable[[str], Any] | None = None, **how: Any) -> Any:
    """A :class:`SearchOptions` field with its :class:`Flag` (``how``: its help, choices,
    metavar, repeat); a list default is copied for each instance."""
    metadata = {FLAG: Flag(flag, convert=convert, **how)}
    if isinstance(default, list):
        return field(default_factory=default.copy, metadata=metadata)
    return field(default=default, metadata=metadata)
