"""Many workers on one PostgreSQL study: Optuna's own distributed mode, with a real server.

The server is Debian's PostgreSQL: the one `.ci/run` starts on loopback
(``PRECSEARCH_POSTGRES_URL``), or else one started here in a throwaway folder (with
``PRECSEARCH_REQUIRE_POSTGRES`` a missing server fails instead of skipping).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import MODELS, PostgresServer, run_cli


@pytest.fixture(scope="module")
def postgres_url(tmp_path_factory):
    """A PostgreSQL database's URL: CI's server, or one started here."""
    if os.environ.get("PRECSEARCH_POSTGRES_URL"):
        yield os.environ["PRECSEARCH_POSTGRES_URL"]
        return
    server = PostgresServer(port=54329)
    try:
        yield server.url
    finally:
        server.close()


def precsearch(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "precsearch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def wait_for(condition, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.25)


@pytest.mark.slow
def test_workers_on_two_machines_share_one_study_on_postgresql(postgres_url, tmp_path):
    import optuna

    from precsearch.stored import answered_without_training, is_repeat

    def run(machine: str, *more: str) -> list[str]:
        # Each "machine" has its own --out folder (work files, model info, exports).
        return [
            "run",
            str(MODELS / "mlp.py"),
            *("--storage", postgres_url, "--study-name", "shared"),
            *("--out", str(tmp_path / machine), "--steps", "15"),
            *("--dtypes", "float32,bfloat16", "--sampler", "random"),
            *("--fp32-runs", "3"),  # the shared study is the subject, not the test's power
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
    # Three new trials each; a repeat of a measured policy is stored but not counted, nor
    # is a proposal the probes or the pins answered without training.
    done = [
        t for t in study.trials
        if t.state.name == "COMPLETE" and not is_repeat(t) and not answered_without_training(t)
    ]  # fmt: skip
    assert len(done) == 6, [(t.state.name, t.user_attrs) for t in study.trials]
    assert all("result" in t.user_attrs for t in done)
    assert len({t.user_attrs["pid"] for t in done}) == 2  # both workers ran trials
    assert {"fp32", "global_bfloat16"} <= {t.user_attrs.get("baseline") for t in done}

    # 3. Once, on one machine: no new trials; confirm and export the winner.
    final = run_cli(*run("a", "--trials", "0", "--confirm-time", "1"))
    assert final.returncode == 0, final.stderr[-3000:]
    assert "Answer (fresh rounds):" in final.stdout
    assert (tmp_path / "a" / "shared" / "best_policy.json").is_file()

    shown = run_cli("show", "shared", "--storage", postgres_url)
    assert shown.returncode == 0, shown.stderr[-2000:]
    # An FP32 twin enqueued near the end may be left WAITING when both workers reach
    # their --trials: it is listed as not run, never counted as a trial.
    assert "shared': 6 trials (" in shown.stdout and "Answer (fresh rounds):" in shown.stdout
    waiting = sum(t.state.name == "WAITING" for t in study.trials)
    assert ("enqueued, not run" in shown.stdout) == (waiting > 0)


def test_a_worker_needs_an_existing_study(postgres_url, tmp_path):
    missing = run_cli("worker", "nope", "--storage", postgres_url, "--out", str(tmp_path))
    assert missing.returncode == 2
    assert "no study named 'nope'" in missing.stderr


# A trial beats every 5 s and counts as dead after 5 silent beats (25 s): a beat that
# a loaded machine delays by seconds never fails a live trial. No test waits for it: on
# one host the sweep at a run's start finds a dead trial by its process id.
HEARTBEAT = "5"


def create(url: str, name: str, out: Path, model: Path = MODELS / "faulty.py") -> list[str]:
    return [
        "run", str(model), "--storage", url, "--study-name", name, "--out", str(out),
        "--steps", "15", "--dtypes", "float32,bfloat16", "--group-by", "global",
        "--sampler", "random", "--heartbeat", HEARTBEAT, "--trials", "0", "--confirm", "0",
        "--fp32-runs", "3",  # stored in the study: its workers judge against 3 as well
    ]  # fmt: skip


@pytest.mark.slow
def test_a_worker_killed_mid_trial_leaves_no_trial_running_and_its_trial_is_retried_once(
    postgres_url, tmp_path
):
    import optuna

    made = run_cli(*create(postgres_url, "killed", tmp_path / "a"))
    assert made.returncode == 0, made.stderr[-3000:]
    # Machine A hangs in bfloat16 (its second trial, the global recipe) and is killed.
    a = precsearch(
        "worker", "killed", "--storage", postgres_url, "--trials", "3",
        "--out", str(tmp_path / "a"), env={"PRECSEARCH_FAULT": "hang"},
    )  # fmt: skip
    study = optuna.load_study(study_name="killed", storage=postgres_url)

    def running(number: int) -> bool:
        trials = study.get_trials(deepcopy=False)
        return (
            len(trials) > number
            and trials[number].state.name == "RUNNING"
            and ("pid" in trials[number].user_attrs)
        )

    try:
        wait_for(lambda: running(1))
        os.kill(a.pid, signal.SIGKILL)  # its trial worker follows (parent-death signal)
        a.wait()
    finally:
        a.kill()
    # Machine B carries on: the sweep as it starts finds A's process gone and fails A's
    # trial (from another host, 5 silent heartbeats would), the trial is re-enqueued
    # once, and B runs it.
    b = precsearch("worker", "killed", "--storage", postgres_url, "--trials", "3",
                   "--out", str(tmp_path / "b"))  # fmt: skip
    out, err = b.communicate(timeout=600)
    assert b.returncode == 0, err[-3000:]
    assert "marked trials [1] failed" in out
    trials = study.get_trials()
    states = [t.state.name for t in trials]
    assert "RUNNING" not in states, states
    assert trials[1].state.name == "FAIL"
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == 1]
    assert len(retries) == 1 and retries[0].state.name == "COMPLETE", states
    assert retries[0].params == trials[1].params
    done = [t.number for t in trials if t.state.name == "COMPLETE"]
    assert len(done) == len(set(done)) >= 4
    # B did not train the FP32 references again: it read the ones A stored.
    stored = [k for k in study.user_attrs if k.startswith("reference:")]
    assert stored
    for key in stored:
        assert (tmp_path / "b" / "killed" / "work" / key.split(":", 1)[1]).is_file()
    finished = run_cli("finish", "killed", "--storage", postgres_url, "--out",
                       str(tmp_path / "b"), "--confirm-time", "1")  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "Answer (fresh rounds):" in finished.stdout
    assert (tmp_path / "b" / "killed" / "best_policy.json").is_file()


@pytest.mark.slow
def test_two_creators_racing_enqueue_the_baselines_once(postgres_url, tmp_path):
    import optuna

    racers = [
        precsearch(*create(postgres_url, "race", tmp_path / name, MODELS / "mlp.py"))
        for name in ("a", "b")
    ]
    for racer in racers:
        _, err = racer.communicate(timeout=600)
        assert racer.returncode == 0, err[-3000:]
    study = optuna.load_study(study_name="race", storage=postgres_url)
    labels = sorted(t.user_attrs.get("baseline") for t in study.trials)
    assert labels == ["fp32", "global_bfloat16"]


def test_a_worker_on_other_hardware_is_refused(postgres_url, tmp_path):
    import optuna

    made = run_cli(*create(postgres_url, "elsewhere", tmp_path, MODELS / "mlp.py"))
    assert made.returncode == 0, made.stderr[-3000:]
    study = optuna.load_study(study_name="elsewhere", storage=postgres_url)
    study.set_user_attr(
        "hardware", {"cpu": "Other CPU", "cpu_low_precision_flags": ["amx_bf16"], "gpus": []}
    )
    joined = run_cli("worker", "elsewhere", "--storage", postgres_url, "--trials", "1",
                     "--out", str(tmp_path))  # fmt: skip
    assert joined.returncode == 2
    assert "measures speed on Other CPU (amx_bf16; no GPU)" in joined.stderr
    assert len(joined.stderr.strip().splitlines()) == 1
