"""The README's two commands are what CI runs: keep them true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    setup = text[text.index("## Set up") : text.index("## Three ways")]
    return re.findall(r"```bash\n(.*?)\n```", setup, re.S)


def test_ci_runs_the_readme_commands():
    install, test = commands()
    ci = (ROOT / ".ci" / "run").read_text()
    assert test in ci.splitlines()
    pip_install = install.split("&&")[1].strip()
    packages = pip_install.split("install", 1)[1].strip()
    assert any(line.endswith(packages) and "pip install" in line for line in ci.splitlines())


def test_readme_example_exists():
    install, _ = commands()
    example = install.split("precsearch run")[1].strip()
    assert (ROOT / example).is_file()


def test_the_results_section_is_what_the_benchmark_files_say():
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme", ROOT / "benchmarks" / "readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.results_section() in (ROOT / "README.md").read_text(), (
        "README.md's Results differ from benchmarks/results/: run `python benchmarks/run.py readme`"
    )


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)


# Tiny inputs for the README's examples: the shared test model, a trial or two.
TINY = {
    '"studies/digits_cnn/model.py", trials=12, steps=80': (
        f'"{ROOT / "tests" / "models" / "mlp.py"}", trials=2, steps=20, dtypes="float32,bfloat16", '
        "rounds=2"
    ),
    '"studies/digits_cnn"': '"studies/mlp"',
    "trials=8,": 'trials=2, steps=20, dtypes="float32,bfloat16", rounds=2,',
    "epochs=2": "epochs=1",
}


@pytest.mark.slow
def test_every_python_block_of_the_readme_runs(tmp_path, monkeypatch):
    """So that no example can go stale: each block runs, in order, on tiny inputs."""
    import keras
    import numpy as np

    from precsearch import Policy

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "studies" / "wide_mlp").mkdir(parents=True)
    Policy(default="mixed_bfloat16", batch_size=32).save("studies/wide_mlp/best_policy.json")

    def build_model():
        return keras.Sequential(
            [keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
             keras.layers.Dense(4, activation="softmax")]
        )  # fmt: skip

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 16)).astype("float32")
    y = rng.integers(0, 4, 256)
    namespace = {"build_model": build_model, "x": x, "y": y}
    blocks = python_blocks()
    assert len(blocks) >= 4
    for block in blocks:
        first = block.splitlines()[0]
        if first.startswith("# ") and first.endswith(".py"):  # a file of its own
            (tmp_path / first[2:]).write_text(block)
            continue
        for text, tiny in TINY.items():
            block = block.replace(text, tiny)
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["result"].best_policy is not None
