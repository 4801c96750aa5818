from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
from helpers import MODELS, run_cli

from precsearch.builtins.dimensions import BatchSize, JitCompile, LayerDtypes, LossScaling
from precsearch.builtins.exporters import PolicyJson, SavedModel, TrialsCsv
from precsearch.builtins.loaders import ModelFileLoader
from precsearch.builtins.objectives import FidelityGap, Speedup
from precsearch.plugins import PluginError, create, get
from precsearch.testing import (
    DimensionContract,
    ExporterContract,
    LoaderContract,
    ObjectiveContract,
)


class TestLayerDtypes(DimensionContract):
    plugin_class = LayerDtypes


class TestLayerDtypesByLayer(DimensionContract):
    plugin_class = LayerDtypes

    def make_options(self):
        from precsearch.study.space import SpaceOptions

        return SpaceOptions(group_by="layer", dtypes=["float32", "bfloat16"])


class TestLossScaling(DimensionContract):
    plugin_class = LossScaling


class TestBatchSize(DimensionContract):
    plugin_class = BatchSize


class TestJitCompile(DimensionContract):
    plugin_class = JitCompile


class TestSpeedup(ObjectiveContract):
    plugin_class = Speedup


class TestFidelityGap(ObjectiveContract):
    plugin_class = FidelityGap
    arg = "1.5"


class TestModelFileLoader(LoaderContract):
    plugin_class = ModelFileLoader

    def make_source(self, tmp_path):
        return MODELS / "mlp.py"

    def make_bad_source(self, tmp_path):
        return tmp_path / "missing.py"


class TestPolicyJson(ExporterContract):
    plugin_class = PolicyJson


class TestTrialsCsv(ExporterContract):
    plugin_class = TrialsCsv


class TestSavedModel(ExporterContract):
    plugin_class = SavedModel


@pytest.fixture
def fake_distribution(tmp_path, monkeypatch):
    """A distribution on sys.path that breaks the rules: a duplicate and a broken plugin."""
    info = tmp_path / "fakedist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakedist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[precsearch.exporters]\n"
        "policy_json = precsearch.builtins.exporters:TrialsCsv\n"
        "broken = fake_module_that_is_not_there:Exporter\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_unknown_name_lists_the_available():
    with pytest.raises(PluginError, match="unknown exporter 'onnx'; available: .*saved_model"):
        get("exporter", "onnx")


def test_duplicate_and_broken_plugins(fake_distribution):
    with pytest.raises(PluginError, match="defined twice: by .*fakedist.* and .*precsearch"):
        get("exporter", "policy_json")
    with pytest.raises(PluginError, match="'broken' from distribution 'fakedist' failed to import"):
        get("exporter", "broken")
    assert get("exporter", "trials_csv") is TrialsCsv  # the others still load


def test_plugins_command_reports_broken_and_duplicates(fake_distribution):
    env = {**os.environ, "PYTHONPATH": str(fake_distribution)}
    done = subprocess.run(
        [sys.executable, "-m", "precsearch", "plugins"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "BROKEN" in done.stdout and "fakedist" in done.stdout
    assert "DUPLICATE NAME" in done.stdout
    assert "layer_dtypes" in done.stdout and "saved_model" in done.stdout


def test_create_passes_the_argument():
    assert create("objective", "fidelity=2.5").tolerance == 2.5
    with pytest.raises(PluginError, match="expected a subclass"):
        from precsearch.plugins._registry import PluginEntry

        PluginEntry("exporter", "x", "d", "precsearch.errors:UserInputError").load()


THROWAWAY = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "precsearch-throwaway"
        version = "0.0.1"

        [project.entry-points."precsearch.dimensions"]
        output_dtype = "precsearch_throwaway:OutputDtype"

        [project.entry-points."precsearch.exporters"]
        hello = "precsearch_throwaway:Hello"
        """,
    "precsearch_throwaway.py": '''
        """A third-party plugin package, made and installed by a test."""
        from precsearch.plugins import Dimension, Exporter
        from precsearch.study.space import SHORT_DTYPES


        class OutputDtype(Dimension):
            """Also search the output layer's dtype."""

            name = "output_dtype"

            def choices(self):
                return {"dtype_output": ["float32", "bfloat16"]}

            def write(self, params, draft):
                for layer_id in self.info["output_layers"]:
                    draft["layers"][layer_id] = SHORT_DTYPES[params["dtype_output"]]


        class Hello(Exporter):
            """Writes hello.txt with the winner's batch size."""

            name = "hello"

            def export(self, winner, directory):
                path = directory / "hello.txt"
                path.write_text(f"batch size {winner.policy.batch_size}\\n")
                return [path]
        ''',
}


@pytest.fixture
def plugin_python(tmp_path) -> Path:
    """The python of a throw-away virtual environment with the plugin pip-installed in
    it: this environment's packages stay as they are."""
    source = tmp_path / "throwaway"
    source.mkdir()
    for name, text in THROWAWAY.items():
        (source / name).write_text(textwrap.dedent(text))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # It sees this environment's packages (precsearch, TensorFlow, pip), .pth files and
    # all; --system-site-packages would show the base interpreter's instead.
    own = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_path("purelib")])
    (Path(own) / "_parent_environment.pth").write_text(
        "".join(f"import site; site.addsitedir({path!r})\n" for path in ours)
    )
    pip = [python, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = ["--no-build-isolation"] if _has_setuptools() else []
    subprocess.run([*pip, "install", "--no-deps", *build, str(source)], check=True)
    return python


def _has_setuptools() -> bool:
    try:
        import setuptools  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
def test_a_pip_installed_plugin_is_listed_and_used_by_run(plugin_python, tmp_path):
    listed = run_cli("plugins", python=plugin_python)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "output_dtype" in listed.stdout and "precsearch-throwaway" in listed.stdout
    assert "precsearch-throwaway" not in run_cli("plugins").stdout  # not installed here
    done = run_cli(
        "run",
        str(MODELS / "mlp.py"),
        "--out",
        str(tmp_path),
        "--trials",
        "3",
        "--steps",
        "20",
        "--dtypes",
        "float32,bfloat16",
        "--dimension",
        "layer_dtypes",
        "--dimension",
        "output_dtype",
        "--export",
        "hello",
        "--in-process",
        "--confirm-time",
        "1",
        "--fp32-runs",
        "3",
        python=plugin_python,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "mlp" / "hello.txt").read_text().startswith("batch size 32")
    import pandas as pd

    frame = pd.read_csv(tmp_path / "mlp" / "trials.csv")
    assert "param:dtype_output" in frame.columns and "param:batch_size" not in frame.columns


def test_unknown_plugins_on_the_command_line_exit_2(tmp_path):
    done = run_cli("run", str(MODELS / "mlp.py"), "--out", str(tmp_path), "--export", "nope")
    assert done.returncode == 2 and "unknown exporter 'nope'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_bundled_plugins_import_nothing_of_precsearch_but_its_plugin_api():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "plugins"
    imported = set()
    for path in root.glob("precsearch-*/precsearch_*/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("precsearch"):
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name.startswith("precsearch")}
    assert imported == {"precsearch.plugins"}
