"""The steps of a study's run that need no trials to test."""

from __future__ import annotations

from pathlib import Path

from precsearch.study import run as run_module
from precsearch.study.options import SearchOptions


class Logs:
    def write_all(self, study):
        return Path("tb")


def test_one_file_that_fails_does_not_keep_the_others_from_being_written(tmp_path, monkeypatch):
    def broken(study, path):
        raise ValueError("a figure the table cannot hold")

    monkeypatch.setattr(run_module, "write_trials_csv", broken)
    monkeypatch.setattr(run_module, "write_report", lambda study, path: path)
    run = run_module._prepare(
        Path(__file__).parent / "models" / "mlp.py", SearchOptions(out=str(tmp_path))
    )
    failure = run_module._write_files(run, study=None, logs=Logs())
    assert failure == (
        "writing the study's files failed (trials.csv: ValueError: a figure the table cannot hold)"
    )
    assert run.paths["tensorboard"] == Path("tb")
    assert run.paths["report.html"] == run.study_dir / "report.html"
    assert "trials.csv" not in run.paths
