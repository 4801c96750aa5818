"""Many workers on one PostgreSQL study: Optuna's own distributed mode, with a real server.

The server is Debian's PostgreSQL, started here in a throwaway folder (`.ci/run` installs
the package and sets ``PRECSEARCH_REQUIRE_POSTGRES`` so that a missing server fails
instead of skipping).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import MODELS, PostgresServer, run_cli


@pytest.fixture(scope="module")
def postgres_url(tmp_path_factory):
    """A PostgreSQL server on a Unix socket in a fresh folder, and a database's URL."""
    server = PostgresServer(port=54329)
    try:
        yield server.url
    finally:
        server.close()


@pytest.mark.slow
def test_workers_on_two_machines_share_one_study_on_postgresql(postgres_url, tmp_path):
    import optuna

    def run(machine: str, *more: str) -> list[str]:
        # Each "machine" has its own --out folder (work files, model info, exports).
        return [
            "run",
            str(MODELS / "mlp.py"),
            *("--storage", postgres_url, "--study-name", "shared"),
            *("--out", str(tmp_path / machine), "--steps", "15"),
            *("--dtypes", "float32,bfloat16", "--sampler", "random"),
            *more,
        ]

    # 1. Create the study (inspect the model, enqueue the baselines), no trials.
    made = run_cli(*run("a", "--trials", "0", "--confirm", "0"))
    assert made.returncode == 0, made.stderr[-3000:]

    # 2. Two workers at once, each with its own folder, the study's options and seed.
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "precsearch", "worker", "shared", "--storage", postgres_url]
            + ["--trials", "3", "--out", str(tmp_path / machine)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for machine in ("a", "b")
    ]
    outputs = [w.communicate(timeout=600) for w in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err[-3000:]

    study = optuna.load_study(study_name="shared", storage=postgres_url)
    # Three new trials each; a repeat of a measured policy is stored but not counted.
    done = [
        t for t in study.trials if t.state.name == "COMPLETE" and "duplicate_of" not in t.user_attrs
    ]
    assert len(done) == 6, [t.state.name for t in study.trials]
    assert all("result" in t.user_attrs for t in done)
    assert len({t.user_attrs["pid"] for t in done}) == 2  # both workers ran trials
    assert {"fp32", "global_bfloat16"} <= {t.user_attrs.get("baseline") for t in done}

    # 3. Once, on one machine: no new trials; confirm and export the winner.
    final = run_cli(*run("a", "--trials", "0", "--rounds", "2"))
    assert final.returncode == 0, final.stderr[-3000:]
    assert "Answer:" in final.stdout
    assert (tmp_path / "a" / "shared" / "best_policy.json").is_file()

    shown = run_cli("show", "shared", "--storage", postgres_url)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "6 complete" in shown.stdout and "Answer:" in shown.stdout


def test_a_worker_needs_an_existing_study(postgres_url, tmp_path):
    missing = run_cli("worker", "nope", "--storage", postgres_url, "--out", str(tmp_path))
    assert missing.returncode == 2
    assert "no study named 'nope'" in missing.stderr
