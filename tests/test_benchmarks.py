"""benchmarks/: its one list of experiments is what ``run.py --help`` and its README say,
and its code stays in rooms (no file over 500 lines, no function over 80, no ``global``).
Nothing here runs an experiment or imports TensorFlow."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture
def experiments(monkeypatch):
    """``benchmarks/experiments`` as ``run.py`` imports it (benchmarks/ on the path)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("experiments")


def test_the_readme_lists_exactly_the_experiments_and_all(experiments):
    text = (BENCHMARKS / "README.md").read_text()
    listed = re.findall(r"^\| `(\w+)` \|", text, re.M)
    assert listed == [*experiments.NAMES, "all"]
    table = "\n".join(experiments.readme_table())
    assert table in text, f"benchmarks/README.md's table of experiments should be:\n{table}"


def test_all_runs_its_experiments_in_the_lists_order(experiments):
    assert set(experiments.ALL) <= set(experiments.NAMES), "ALL names an unknown experiment"
    assert [e.name for e in experiments.chosen("all")] == [
        name for name in experiments.NAMES if name in experiments.ALL
    ]
    assert [e.name for e in experiments.chosen("quality")] == ["quality"]
    for name in experiments.ALL:
        assert name in experiments.all_does()


def test_help_is_the_list(experiments):
    run = importlib.import_module("run")
    text = run.parser().format_help()
    for experiment in experiments.EXPERIMENTS:
        assert re.search(rf"^  {experiment.name} +{re.escape(experiment.does)}$", text, re.M)
    assert experiments.all_does() in text


def test_every_experiment_names_a_function_of_its_module(experiments):
    for experiment in experiments.EXPERIMENTS:
        module, function = experiment.target.split(":")
        path = BENCHMARKS / (module.replace(".", "/") + ".py")
        defined = {
            n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)
        }
        assert function in defined, f"{experiment.name}: no {function} in {path}"


def test_benchmarks_stay_in_rooms():
    for path in sorted(BENCHMARKS.rglob("*.py")):
        if "work" in path.relative_to(BENCHMARKS).parts:
            continue  # study folders the experiments leave
        source = path.read_text()
        assert len(source.splitlines()) <= 500, f"{path} is over 500 lines"
        for node in ast.walk(ast.parse(source)):
            assert not isinstance(node, ast.Global), f"{path}:{node.lineno} uses global"
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                assert length <= 80, f"{path}:{node.lineno} {node.name} is {length} lines"
