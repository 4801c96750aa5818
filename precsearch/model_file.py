"""Loading a user's model file (or callables) into a :class:`ModelSpec`.

The model file contract (the README's "Three ways to use it"): ``build_model()`` returns
a ``keras.Model``; ``train_data()`` returns *unbatched* examples, ``(x, y)`` arrays or an unbatched
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
    "callable_fingerprint",
    "custom_objects",
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
    functions = [as_function(value) for value in (train_data, val_data, compile_kwargs)]
    return ModelSpec(
        source=f"<callable {name}>",
        build_model=build_model,
        train_data=functions[0],
        val_data=functions[1],
        compile_kwargs=functions[2],
        fingerprint=callable_fingerprint(build_model, *functions),
    )


class _Unhashable(Exception):
    """A value the fingerprint cannot see into (say, a dataset object)."""


def callable_fingerprint(*objects: Any) -> str:
    """A hash of what some callables compute: their code, defaults, closure values and
    the globals they name (functions followed, arrays by their bytes, modules by name).

    An edited build function or other data gives another hash, so that FP32 references
    cached for the old one are not reused. ``""`` when something cannot be seen into
    (an object without a plain value, such as a ``tf.data.Dataset``): then nothing is
    cached on disk for it.
    """
    digest = hashlib.sha256()
    try:
        for obj in objects:
            _feed(digest, obj, set(), 0)
    except (_Unhashable, RecursionError):
        return ""
    return digest.hexdigest()[:16]


def _feed(digest: Any, obj: Any, seen: set[int], depth: int) -> None:
    import types

    if depth > 30:
        raise _Unhashable
    put = digest.update
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        put(repr((type(obj).__name__, obj)).encode())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        put(f"{type(obj).__name__}[{len(items)}]".encode())
        for item in items:
            _feed(digest, item, seen, depth + 1)
    elif isinstance(obj, dict):
        put(f"dict[{len(obj)}]".encode())
        for key in sorted(obj, key=repr):
            _feed(digest, key, seen, depth + 1)
            _feed(digest, obj[key], seen, depth + 1)
    elif isinstance(obj, types.ModuleType):
        put(f"module:{obj.__name__}".encode())
    elif isinstance(obj, type):
        put(f"class:{obj.__module__}.{obj.__qualname__}".encode())
    elif isinstance(obj, types.FunctionType):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        _feed_code(digest, obj.__code__)
        for value in (obj.__defaults__, obj.__kwdefaults__):
            _feed(digest, value, seen, depth + 1)
        for cell in obj.__closure__ or ():
            _feed(digest, cell.cell_contents, seen, depth + 1)
        for name in _names(obj.__code__):
            if name in obj.__globals__:
                put(f"global:{name}".encode())
                _feed(digest, obj.__globals__[name], seen, depth + 1)
    elif type(obj).__module__ == "numpy" or hasattr(obj, "__array_interface__"):
        import numpy as np

        array = np.ascontiguousarray(obj)
        if array.dtype == object:
            raise _Unhashable
        put(f"array:{array.dtype}:{array.shape}".encode())
        put(array.tobytes())
    else:
        raise _Unhashable


def _feed_code(digest: Any, code: Any) -> None:
    import types

    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(digest, const)
        else:
            digest.update(repr(const).encode())


def _names(code: Any) -> list[str]:
    """The global names a function's code (and the code nested in it) refers to."""
    import types

    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _names(const)
    return list(dict.fromkeys(names))


def custom_objects(model: Any) -> dict[str, Any]:
    """The classes of a compiled model's loss and optimizer objects (a loss function
    itself), by name: its compile config names them, and Keras cannot import one the
    model file defines inside ``build_model`` (a ``keras.losses.Loss`` subclass, as the
    Keras guides write them)."""
    found: dict[str, Any] = {}
    loss = getattr(model, "loss", None)
    if isinstance(loss, dict):
        losses = list(loss.values())
    elif isinstance(loss, (list, tuple)):
        losses = list(loss)
    else:
        losses = [loss]
    for obj in [*losses, getattr(model, "optimizer", None)]:
        if obj is None or isinstance(obj, str):
            continue
        kind = obj if isinstance(obj, type) or not hasattr(obj, "get_config") else type(obj)
        name = getattr(kind, "__name__", None)
        if name:
            found[name] = kind
    return found
