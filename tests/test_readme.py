"""The README's two commands are what CI runs: keep them true."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import sign_data, tiny_model

from precsearch.model_file import read_config

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


def test_readme_example_is_a_model_file():
    install, _ = commands()
    example = ROOT / install.split("precsearch run")[1].strip()
    # The contract, read without importing (tests/test_examples.py runs it): the two
    # functions, and a precsearch_config that read_config accepts.
    defined = {
        n.name for n in ast.parse(example.read_text()).body if isinstance(n, ast.FunctionDef)
    }
    assert {"build_model", "train_data"} <= defined
    batch_size = read_config(example)["batch_size"]  # the example states its own
    assert isinstance(batch_size, int) and batch_size > 0


def readme_module():
    """``benchmarks/readme.py``, which writes the README's Results."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme", ROOT / "benchmarks" / "readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_results_section_is_what_the_benchmark_files_say():
    module = readme_module()
    text, newest = (ROOT / "README.md").read_text(), module.newest()
    folder = module.quoted(text)
    rerun = f"run `python benchmarks/run.py readme --results {newest.relative_to(ROOT)}`"
    assert folder.resolve() == newest.resolve(), f"the newest full run is not quoted: {rerun}"
    assert module.results_section(folder) in text, f"README.md's Results differ: {rerun}"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)


# Tiny inputs for the README's examples: the shared test model, a trial or two.
TINY = {
    '"studies/digits_cnn/model.py", trials=12, steps=80': (
        f'"{ROOT / "tests" / "models" / "mlp.py"}", trials=2, steps=20, dtypes="float32,bfloat16", '
        "confirm_time=1, fp32_runs=3"
    ),
    '"studies/digits_cnn"': '"studies/mlp"',
    "trials=8,": 'trials=2, steps=20, dtypes="float32,bfloat16", confirm_time=1, fp32_runs=3,',
    "epochs=2": "epochs=1",
}


FIGURE = r"(\d+(?:\.\d+)?%|\d+\.\d+x?)"  # a percentage (its % kept), a ratio such as 1.46x
CITED = re.compile(r"`((?:benchmarks/results/)?[\w/]*?(?:[\w]+\.(?:md|csv)|/))`")


def _cells(path: Path) -> set[str]:
    """Every whole figure of a results page and of its CSV: "3.14" is not one in "13.145",
    nor "1.4x" in "1.46x"."""
    text = "\n".join(p.read_text() for p in (path, path.with_suffix(".csv")) if p.exists())
    return set(re.findall(r"(?<![\w.])" + FIGURE + r"(?!\d)", text))


def test_every_figure_in_the_results_prose_is_in_the_file_it_cites():
    """The prose around the generated table quotes figures: each is followed, in its
    paragraph, by the results file it comes from (`name.md`, looked up in the last folder
    the paragraph names before it, else in the one the Results quote, else in
    benchmarks/results/), and is a whole figure of that file: none is typed from memory
    or from another page."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Results") :]
    section = section[: section.index("\n## ", 1)]
    generated = section[section.index("<!-- results: generated") : section.index("end -->")]
    results, quoted = ROOT / "benchmarks" / "results", readme_module().quoted(text)
    wrong, found = [], 0
    for paragraph in section.replace(generated, "").split("\n\n"):
        for figure in re.finditer(r"(?<![\w.])" + FIGURE, paragraph):  # a range's ends too
            cite = next((c for c in CITED.finditer(paragraph, figure.end())
                         if c[1].endswith((".md", ".csv"))), None)  # fmt: skip
            if cite is None:
                wrong.append(f"{figure[1]}: cites no results file after it")
                continue
            folders = [ROOT / c[1] for c in CITED.finditer(paragraph[: cite.start()])
                       if c[1].endswith("/")][-1:]  # fmt: skip
            where = [f / cite[1] for f in (*folders, quoted, results, ROOT)]  # ROOT: a full path
            page = next((p for p in where if p.exists()), None)
            found += 1
            if page is None or figure[1] not in _cells(page):
                wrong.append(f"{figure[1]}: not a figure of {cite[1]} ({page or 'no such file'})")
    assert found, "the Results prose quotes no figure"
    assert not wrong, "README Results prose: " + "; ".join(wrong)


def test_every_python_block_of_the_readme_runs(tmp_path, monkeypatch):
    """So that no example can go stale: each block runs, in order, on tiny inputs."""
    import keras

    from precsearch import Policy, load_policy

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "studies" / "wide_mlp").mkdir(parents=True)
    Policy(default="mixed_bfloat16", batch_size=32).save("studies/wide_mlp/best_policy.json")

    def build_model():
        return tiny_model(
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(4, activation="softmax"),  # the README compiles for probabilities
            features=16,
            compiled=False,
        )

    x, y = sign_data(256, features=16)
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
    result = namespace["result"]  # the build function's study, the last search
    assert len(result.trials) == 2
    assert result.best_policy == load_policy(result.study_dir / "best_policy.json")
    assert namespace["model"].layers[0].dtype_policy.name == "mixed_bfloat16"  # the policy block
