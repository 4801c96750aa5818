"""Loading a user's model file (or callables) into a :class:`ModelSpec`.

The model file contract (DESIGN.md): ``build_model()`` returns a ``keras.Model``;
``train_data()`` returns *unbatched* examples, ``(x, y)`` arrays or an unbatched
``tf.data.Dataset``; optional ``val_data()`` (same form), ``compile_kwargs()`` (optimizer,
loss, metrics) and ``precsearch_config``, a literal dict read without importing the file.

precsearch shuffles (fixed seed), batches, repeats and prefetches the examples itself, so
that every trial sees the same data in the same order at any batch size. A dataset that
is already batched is refused rather than silently unbatched: its batch size would be
thrown away without the user knowing.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from precsearch.errors import (
    UserInputError,
    is_resource_problem,
    missing_module,
    one_line,
    read_user_file,
)
from precsearch.records import ModelSpec

__all__ = [
    "ModelSpec",
    "functions_of",
    "import_model_file",
    "load_model_file",
    "read_config",
    "read_literal",
    "spec_from_callables",
]

CONFIG_KEYS = {
    "batch_size": int,
    "steps": int,
    "dtypes": (list, tuple, str),
    "group_by": str,
    "tolerance": (int, float),
    "trials": int,
}


def _parse(path: Path) -> ast.Module:
    source = read_user_file(path, "model file")
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise UserInputError(
            f"{path}:{exc.lineno}: syntax error in model file ({exc.msg})"
        ) from None


def read_literal(path: str | Path, name: str, default: Any = None) -> Any:
    """The value of a top-level ``name = <literal>`` in a Python file, without importing it.

    Raises:
        UserInputError: Missing file, syntax error, or a value that is not a literal.
    """
    path = Path(path)
    value = default
    for node in _parse(path).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if not any(isinstance(t, ast.Name) and t.id == name for t in targets):
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise UserInputError(f"{path}: {name} must be a literal (no names or calls)") from None
    return value


def read_config(path: str | Path) -> dict[str, Any]:
    """``precsearch_config`` of a model file, read as a literal without importing it.

    Raises:
        UserInputError: Missing file, syntax error, or a config that is not a literal
            dict of known keys.
    """
    config = read_literal(path, "precsearch_config", {})
    if not isinstance(config, dict):
        raise UserInputError(
            f"{path}: precsearch_config is a {type(config).__name__}, expected a dict"
        )
    for key, value in config.items():
        if key not in CONFIG_KEYS:
            known = ", ".join(sorted(CONFIG_KEYS))
            raise UserInputError(f"{path}: precsearch_config key {key!r} unknown (known: {known})")
        expected = CONFIG_KEYS[key]
        if isinstance(value, bool) or not isinstance(value, expected):
            raise UserInputError(
                f"{path}: precsearch_config[{key!r}] is {value!r}, expected "
                f"{getattr(expected, '__name__', 'a list or string')}"
            )
    return config


def import_model_file(path: str | Path) -> Any:
    """Import a Python file as a fresh module; any error is one ``UserInputError`` line."""
    path = Path(path).resolve()
    read_config(path)  # syntax and config errors first, without running anything
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    module_name = f"precsearch_user_model_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserInputError(f"{path}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        del sys.modules[module_name]
        raise missing_module(exc, f"{path}: the model file") from None
    except Exception as exc:
        del sys.modules[module_name]
        if is_resource_problem(exc):
            raise
        raise UserInputError(f"{path}: importing the model file failed ({one_line(exc)})") from None
    module.__precsearch_fingerprint__ = digest
    return module


def functions_of(module: Any, path: str | Path, required: tuple[str, ...]) -> dict[str, Any]:
    """The contract's functions a module defines, checked for presence and callability."""
    functions: dict[str, Any] = {}
    for name in ("build_model", "train_data", "val_data", "compile_kwargs"):
        value = getattr(module, name, None)
        if value is None:
            if name in required:
                raise UserInputError(
                    f"{path}: no function {name}() (the model file must define it)"
                )
            continue
        if not callable(value):
            raise UserInputError(f"{path}: {name} is a {type(value).__name__}, expected a function")
        functions[name] = value
    return functions


def load_model_file(path: str | Path) -> ModelSpec:
    """Import a model file and check that it follows the contract.

    Only the presence and callability of the functions is checked here; what they
    return is checked when the model is first built (:mod:`precsearch.engine.problem`).

    Raises:
        UserInputError: One line naming the file, the function and what was expected.
    """
    path = Path(path).resolve()
    module = import_model_file(path)
    functions = functions_of(module, path, ("build_model", "train_data"))
    return ModelSpec(
        source=str(path),
        config=read_config(path),
        fingerprint=module.__precsearch_fingerprint__,
        **functions,
    )


def spec_from_callables(
    build_model: Callable[[], Any],
    train_data: Callable[[], Any] | Any,
    val_data: Callable[[], Any] | Any | None = None,
    compile_kwargs: Callable[[], dict[str, Any]] | dict[str, Any] | None = None,
) -> ModelSpec:
    """A spec for a notebook: a build function and data (or functions returning data)."""
    if not callable(build_model):
        raise UserInputError(f"build_model is a {type(build_model).__name__}, expected a function")

    def as_function(value: Any) -> Callable[[], Any] | None:
        if value is None or callable(value):
            return value
        return lambda: value

    name = getattr(build_model, "__qualname__", repr(build_model))
    return ModelSpec(
        source=f"<callable {name}>",
        build_model=build_model,
        train_data=as_function(train_data),
        val_data=as_function(val_data),
        compile_kwargs=as_function(compile_kwargs),
        fingerprint=hashlib.sha256(name.encode()).hexdigest()[:16],
    )
