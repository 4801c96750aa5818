"""The package's shape: no import circles, small files, every module importable alone."""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "precsearch"
MAX_LINES = 400


def module_names() -> dict[str, Path]:
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every precsearch module a file imports: at the top, under TYPE_CHECKING, or lazily
    inside a function (a lazy import hides a circle from Python, not from a reader)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name in modules}


def graph() -> dict[str, set[str]]:
    names = module_names()
    return {name: imports_of(path, set(names)) - {name} for name, path in names.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_checker_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_among_the_package_modules():
    edges = graph()
    # The package root loads the notebook API lazily, by design (import precsearch must
    # stay light); everything below it must form no circle, lazy imports included.
    edges["precsearch"] = edges["precsearch"] - {"precsearch.app.api"}
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges))


# The package's layers, top to bottom: a module imports only from layers below its own
# (or from its own subpackage). Units in one layer import nothing of each other: the
# Optuna side and results/ are peers, and so are results/ and the engine.
LAYERS = (
    ("precsearch.__main__",),
    ("precsearch", "precsearch.cli"),
    ("precsearch.app",),  # a whole study: above both sides
    ("precsearch.testing", "precsearch.builtins"),  # contract suites, built-in plugins
    ("precsearch.study",),  # Optuna's side; its executors drive the engine
    ("precsearch.results", "precsearch.engine"),
    ("precsearch.pins",),  # the pins' record read back
    ("precsearch.cost_model",),  # the probes' record read back
    ("precsearch.stored",),  # every stored key, and the trial readers
    ("precsearch.plugins", "precsearch.space"),  # the plugin API: all a plugin imports
    ("precsearch.policy", "precsearch.model_file"),
    # precsearch.backend: what differs by Keras backend, below the policy (training code
    # runs the policy's guard on each backend)
    (
        "precsearch.records",
        "precsearch.stats",
        "precsearch.hardware",
        "precsearch.files",
        "precsearch.backend",
    ),
    ("precsearch.errors", "precsearch._version"),
)


def unit_of(module: str) -> str:
    """``precsearch.study.optimize`` -> ``precsearch.study``; top-level modules are units."""
    return ".".join(module.split(".")[:2])


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """Every import that does not point to a lower layer (or stays in its own unit)."""
    rank = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    found = []
    for module, imported in sorted(edges.items()):
        here = unit_of(module)
        for target in sorted(imported):
            there = unit_of(target)
            if there != here and rank[there] <= rank[here]:
                found.append(f"{module} -> {target}")
    return found


def test_the_layer_checker_finds_an_import_that_points_up_or_sideways():
    edges = {"precsearch.stored": {"precsearch.study.trials"}}
    assert upward_imports(edges) == ["precsearch.stored -> precsearch.study.trials"]
    sideways = {"precsearch.results.export": {"precsearch.study.probe"}}
    assert upward_imports(sideways) == ["precsearch.results.export -> precsearch.study.probe"]
    assert upward_imports({"precsearch.app.run": {"precsearch.study.probe"}}) == []


def test_every_module_sits_in_a_layer_and_imports_only_below_it():
    edges = graph()
    units = {unit_of(name) for name in edges}
    assert units == {unit for layer in LAYERS for unit in layer}
    # The package root loads the notebook API lazily (import precsearch stays light).
    edges["precsearch"] = edges["precsearch"] - {"precsearch.app.api"}
    assert upward_imports(edges) == []


def test_study_and_results_import_nothing_of_each_other():
    crossing = [
        f"{name} -> {target}"
        for name, imported in graph().items()
        for target in imported
        if {unit_of(name), unit_of(target)} == {"precsearch.study", "precsearch.results"}
    ]
    assert crossing == []


def test_only_the_stored_module_reads_or_writes_optunas_attributes():
    # One module owns every stored key (precsearch/stored.py); the rest ask it.
    spelt = {
        name
        for name, path in module_names().items()
        if name != "precsearch.stored"
        and any(word in path.read_text() for word in ("user_attrs", "set_user_attr"))
    }
    assert spelt == set()


def test_records_and_plugin_bases_import_nothing_of_the_engine():
    edges = graph()
    for name, imported in edges.items():
        if name.startswith("precsearch.records"):
            assert all(m.startswith(("precsearch.records", "precsearch.errors")) for m in imported)
    assert edges["precsearch.plugins._base"] <= {"precsearch.records"}


def test_no_module_over_the_size_limit():
    sizes = {name: len(path.read_text().splitlines()) for name, path in module_names().items()}
    assert not {name: n for name, n in sizes.items() if n > MAX_LINES}


def test_every_module_imports_alone():
    def load(name: str) -> tuple[str, subprocess.CompletedProcess]:
        code = f"import {name}"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        return name, done

    names = [name for name in module_names() if not name.endswith("__main__")]
    with ThreadPoolExecutor(4) as pool:
        failed = {
            name: done.stderr.strip().splitlines()[-1]
            for name, done in pool.map(load, names)
            if done.returncode != 0
        }
    assert not failed


def test_writing_tensorboard_runs_in_the_study_process_loads_no_tensorflow(tmp_path):
    # TensorBoard's writer imports TensorFlow where it is installed, unless told not to.
    code = (
        "import sys; from pathlib import Path\n"
        "from precsearch.results.tensorboard_logs import _writer\n"
        f"with _writer(Path({str(tmp_path)!r}) / 'run') as run:\n"
        "    run.scalar('loss', 1.5, 32)\n"
        "    run.text('gradient_norms', '| layer | norm |', 32)\n"
        "    run.hparams({'run': 'trial', 'batch_size': 32}, {}, 'trial 0')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    events = EventAccumulator(str(tmp_path / "run"), size_guidance={"tensors": 0})
    events.Reload()
    points = [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors("loss")]
    assert points == [(32, 1.5)]
    assert "_hparams_/session_start_info" in events.Tags()["tensors"]


def test_the_study_process_loads_no_tensorflow():
    # Every module of the study process's side, imported together, as `run` does.
    sides = ("precsearch.app", "precsearch.study", "precsearch.results", "precsearch.cli")
    names = [n for n in module_names() if n.startswith(sides) and not n.endswith("__main__")]
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in names)
        + ("print(sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'keras'}))\n")
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(names) > 20 and done.stdout.strip() == "[]"


def test_outside_the_engine_only_the_executors_and_the_tensorflow_commands_import_it():
    # The in-process executor runs the engine here by design; `doctor` and `train` are
    # TensorFlow processes themselves. Everything else reaches the engine through the
    # executor protocol (a worker process speaking JSON).
    allowed = {"precsearch.study.executors", "precsearch.cli.commands"}
    importers = {
        name
        for name, imported in graph().items()
        if not name.startswith("precsearch.engine")
        and any(m.startswith("precsearch.engine") for m in imported)
    }
    assert importers == allowed


def test_the_import_paths_the_readme_documented_before_the_layout_still_work():
    from precsearch.records import SHORT_DTYPES
    from precsearch.space import SHORT_DTYPES as documented

    assert documented is SHORT_DTYPES and documented["bfloat16"] == "mixed_bfloat16"
