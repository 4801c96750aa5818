"""The walkthrough notebook, executed headless on a copy of the shared tiny study."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import MODELS

from precsearch import load_policy

NOTEBOOK = Path(__file__).parents[1] / "studies" / "digits_cnn" / "walkthrough.ipynb"


@pytest.mark.slow
def test_the_walkthrough_notebook_runs_search_to_training(tiny_study, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    folder, _, _ = tiny_study
    shutil.copytree(folder, tmp_path / "tiny")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    params = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    params.source = (
        f"MODEL = {str(MODELS / 'mlp.py')!r}\nOUT = {str(tmp_path)!r}\nSTUDY = 'tiny'\n"
        "TRIALS, STEPS = 1, 20\n"
        # The tiny study's own options (tests/conftest.py), so that its trials compare.
        "SEARCH = {'dtypes': 'float32,bfloat16', 'sampler': 'random', 'confirm_time': 1, "
        "'fp32_runs': 3}\n"
        "EPOCHS = 1"
    )
    NotebookClient(
        notebook, timeout=600, kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()  # fmt: skip
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "1/1 trial" in text  # the search's progress line reached the notebook
    shown = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("precsearch study tiny" in h and "<svg" in h for h in shown)
    assert "final loss" in text and "guard: no trouble" in text
    exported = load_policy(tmp_path / "tiny" / "walkthrough_export" / "best_policy.json")
    assert exported.manifest["study"] == "tiny" and exported.manifest["verdict"]
