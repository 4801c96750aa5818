"""The exceptions precsearch raises.

Two kinds matter to callers, as in Keras Tuner: an error in what the user gave us
(:class:`UserInputError`: a bad model file, flag or policy file) stops everything with
one line, while :class:`TrialFailed` fails a single trial and the search goes on.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "PrecsearchError",
    "StorageError",
    "TrialFailed",
    "causes",
    "UserInputError",
    "is_resource_problem",
    "missing_module",
    "one_line",
    "read_user_file",
    "users_fault",
]

# What to install for a module that is missing (its import name to a pip command).
INSTALL = {
    "tensorflow": "pip install 'precsearch[cpu]' (or 'precsearch[gpu]' for CUDA)",
    "keras": "pip install 'precsearch[cpu]'",
    "sklearn": "pip install scikit-learn",
    "psycopg": "pip install 'precsearch[postgres]'",
    "psycopg2": "pip install 'precsearch[postgres]'",
}


class PrecsearchError(Exception):
    """Root of every error precsearch raises on purpose."""


class UserInputError(PrecsearchError, ValueError):
    """Something the user gave us is wrong: a model file, a flag, a policy file.

    The message is one line saying what was received and what was expected; the CLI
    prints it and exits with status 2.
    """


class StorageError(PrecsearchError):
    """The study's storage failed mid-study; the trials it completed stay stored."""


class TrialFailed(PrecsearchError):
    """One trial could not be run or measured; the study records it and goes on.

    Args:
        reason: A short machine-readable cause such as ``"timeout"`` or ``"out of memory"``.
        detail: Free text for people (the last lines of a traceback, a signal name).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_KERAS_WRAPPER = "Exception encountered when calling"
_GRAPH_ERROR = "Graph execution error:"
# An eager op's error starts with its kernel's name and device, which says nothing new.
_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")
_NODE = re.compile(r"\[\[\{\{node ([^}]+)\}\}\]\]|^Detected at node '?([^' ]+)'? defined at")


def _graph_error(lines: list[str]) -> str:
    """TensorFlow's "Graph execution error:" as what failed and where: the op's own
    message (after the Python stack it prints) and the node, whose name is the layer's
    path (``functional/token_embedding/embedding/GatherV2``)."""
    node = next((m.group(1) or m.group(2) for line in lines if (m := _NODE.search(line))), "")
    stack = [i for i, line in enumerate(lines) if line.startswith(("File ", "Detected at node"))]
    after = lines[stack[-1] + 1 :] if stack else lines[1:]
    message = next((line for line in after if not line.startswith("[[")), lines[0])
    message = re.sub(r"\s*\[\[\{\{node [^}]+\}\}\]\].*$", "", message).strip()
    return f"{message} (at node {node})" if node else message


def one_line(exc: BaseException, limit: int = 200) -> str:
    """An exception as one short line for a message: ``Type: first line``.

    Keras re-raises an error inside a layer's ``call`` with a first line of its own
    ("Exception encountered when calling PatchEncoder.call().") and the cause after it;
    that line says where, the next one what: both are kept, in that order.
    """
    text = _FUNCTION_NODE.sub("", _ANSI.sub("", str(exc)))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith(_GRAPH_ERROR):
        lines = [_graph_error(lines)]
    if len(lines) > 1 and lines[0].startswith(_KERAS_WRAPPER):
        where = lines[0].removeprefix(_KERAS_WRAPPER).strip().rstrip(".")
        lines = [f"{lines[1]} (in {where})"]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_user_file(path: Path, kind: str) -> str:
    """The text of a file the user named; missing or unreadable is a UserInputError.

    Args:
        path: The file.
        kind: What it should be, for the message (``"model file"``, ``"policy file"``).
    """
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserInputError(f"{path}: no such {kind}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserInputError(f"{path}: cannot read {kind} ({one_line(exc)})") from None


def missing_module(exc: ModuleNotFoundError, what: str) -> UserInputError:
    """One line for a module that is not installed, naming the command that installs it.

    Args:
        exc: The import's error (its ``name`` is the missing module).
        what: What needed it, e.g. ``"precsearch run"`` or a model file's path.
    """
    top = (exc.name or "").split(".")[0] or "?"
    hint = INSTALL.get(top, f"pip install {top}")
    return UserInputError(f"{what} needs the module {top!r}, which is not installed here: {hint}")


def causes(exc: BaseException) -> list[BaseException]:
    """An exception and the ones behind it (Keras and Optuna re-raise others' errors as
    their own, so the type that matters may be one or two links down)."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain and len(chain) < 20:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def is_resource_problem(exc: BaseException) -> bool:
    """Whether an exception means the machine ran out of something (memory), which is
    no fault of the user's input and must not be reported as one."""
    return any(_out_of_memory(e) for e in causes(exc))


def _out_of_memory(exc: BaseException) -> bool:
    """Out of memory as each framework says it: Python's ``MemoryError``, TensorFlow's
    ``ResourceExhaustedError``, PyTorch's ``OutOfMemoryError``, and JAX's (XLA's)
    runtime error whose status is ``RESOURCE_EXHAUSTED``."""
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or name in ("ResourceExhaustedError", "OutOfMemoryError"):
        return True
    framework = name.endswith("RuntimeError") and name != "RuntimeError"  # XlaRuntimeError
    return framework and str(exc).startswith("RESOURCE_EXHAUSTED")


@contextlib.contextmanager
def users_fault(message: Callable[[str], str]) -> Iterator[None]:
    """What the block raises is a fault of the user's input: ``UserInputError`` with
    ``message(the cause in one line)``. Running out of memory is the machine's fault and
    goes on as it is (it fails a trial, never exit 2), as does a ``UserInputError``."""
    try:
        yield
    except UserInputError:
        raise
    except Exception as exc:
        if is_resource_problem(exc):
            raise
        raise UserInputError(message(one_line(exc))) from None
