"""The README's two commands are what CI runs: keep them true."""

from __future__ import annotations

import re
from pathlib import Path

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
