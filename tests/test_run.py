"""The steps of a study's run that need no trials to test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import MODELS, run_cli

from precsearch.app import files as files_module
from precsearch.app import run as run_module
from precsearch.errors import TrialFailed
from precsearch.records import ModelInfo
from precsearch.study.options import SearchOptions


class Logs:
    def write_all(self, study):
        return Path("tb")


def test_one_file_that_fails_does_not_keep_the_others_from_being_written(tmp_path, monkeypatch):
    def broken(study, path):
        raise ValueError("a figure the table cannot hold")

    monkeypatch.setattr(files_module, "write_trials_csv", broken)
    monkeypatch.setattr(files_module, "write_report", lambda study, path: path)
    run = run_module.prepare_run(
        Path(__file__).parent / "models" / "mlp.py", SearchOptions(out=str(tmp_path))
    )
    failure = files_module.write_study_files(None, run.study_dir, run.paths, Logs())
    assert failure == (
        "writing the study's files failed (trials.csv: ValueError: a figure the table cannot hold)"
    )
    assert run.paths["tensorboard"] == Path("tb")
    assert run.paths["report.html"] == run.study_dir / "report.html"
    assert "trials.csv" not in run.paths


@pytest.mark.slow
def test_a_budget_at_which_nothing_can_judge_is_refused_in_one_line(tmp_path):
    done = run_cli(
        "run", str(MODELS / "frozen.py"), "--out", str(tmp_path), "--steps", "12",
        "--dtypes", "float32,bfloat16", "--trials", "2",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "nothing can judge a candidate at 12 steps" in last
    # A loss that cannot move reads as not moving, or as worse by its data order's noise.
    assert re.search(r"FP32's training loss (does not move|gets worse) over 12 steps", last)


def model_info_of(info: dict) -> ModelInfo:
    """A model info for a run from the contract suite's sample layers."""
    return ModelInfo.from_dict(
        {
            **info,
            "source": "mlp.py",
            "fingerprint": "x",
            "model_name": "m",
            "model_class": "Sequential",
            "params": 1,
            "output_layers": [],
            "train_examples": 64,
        }
    )


class Idle:
    """An executor whose model is the sample info; a study of no new trials asks it
    for nothing more."""

    def __init__(self) -> None:
        from precsearch.testing import sample_model_info

        self.model_info = model_info_of(sample_model_info())

    def start(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        pass


def test_the_study_files_are_written_when_the_confirmation_fails(tmp_path, monkeypatch):
    def dies(run, study, executor):
        raise TrialFailed("worker died (SIGKILL)", "while exporting")

    monkeypatch.setattr(run_module, "_confirm_and_export", dies)
    options = SearchOptions(out=str(tmp_path), trials=0, dtypes="float32,bfloat16", probe_time=0)
    done = run_module.run_study(MODELS / "mlp.py", options, executor=Idle())
    assert done.failure == (
        "confirmation or export failed (TrialFailed: worker died (SIGKILL): while exporting)"
    )
    # What the trials measured reaches the files all the same.
    assert (done.study_dir / "trials.csv").read_text().startswith("number,state,status,")
    assert "<h1>precsearch study mlp</h1>" in (done.study_dir / "report.html").read_text()
    assert done.paths["trials.csv"] == done.study_dir / "trials.csv"


def test_a_new_study_names_its_objectives_for_optunas_plots(tmp_path):
    from precsearch.study.space import SearchSpace
    from precsearch.study.storage import open_storage
    from precsearch.testing import sample_model_info

    info = sample_model_info()
    run = run_module.prepare_run(
        MODELS / "mlp.py", SearchOptions(out=str(tmp_path), dtypes="float32,bfloat16")
    )
    space = SearchSpace(info, dimensions=["layer_dtypes"])
    storage = open_storage(None, run.study_dir)
    model_info = model_info_of(info)
    study, created = run_module._open_search(run, storage, space, model_info)
    assert created and study.metric_names == ["speedup", "fidelity_gap"]
    # A study stored before precsearch named its objectives gets the names on resuming.
    import optuna

    older = run_module.prepare_run(
        MODELS / "mlp.py", SearchOptions(out=str(tmp_path / "older"), dtypes="float32,bfloat16")
    )
    storage = open_storage(None, older.study_dir)
    optuna.create_study(study_name=older.options.study_name, storage=storage,
                        directions=["maximize", "minimize"])  # fmt: skip
    study, created = run_module._open_search(older, storage, space, model_info)
    assert not created and study.metric_names == ["speedup", "fidelity_gap"]
