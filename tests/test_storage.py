"""Storage: stale trials of killed runs, names, and files other processes read."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from precsearch.errors import UserInputError
from precsearch.files import write_text_atomic
from precsearch.study.options import SearchOptions, check_study_name, stored_options, worker_seed
from precsearch.study.storage import fail_stale_trials, open_storage, open_study


@pytest.fixture
def study(tmp_path):
    return open_study("s", open_storage(None, tmp_path))


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], **TEXT)
    return int(done.stdout)


TEXT = {"capture_output": True, "text": True, "check": True}


def test_a_killed_runs_trial_is_failed_and_a_live_ones_is_not(study):
    dead, live = study.ask(), study.ask()
    for trial, pid in ((dead, dead_pid()), (live, os.getpid())):
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("pid", pid)
    assert fail_stale_trials(study, journal=True) == [dead.number]
    states = {t.number: t.state.name for t in study.trials}
    assert states == {dead.number: "FAIL", live.number: "RUNNING"}
    assert "killed" in study.trials[dead.number].user_attrs["reason"]


def test_a_trial_that_has_not_recorded_its_host_yet_is_spared_while_young(study):
    starting = study.ask()  # a live process creates it, then records host and pid
    assert fail_stale_trials(study, journal=True) == []
    assert fail_stale_trials(study, journal=False, grace=0) == []  # RDB: heartbeats do it
    assert fail_stale_trials(study, journal=True, grace=0) == [starting.number]


def test_a_trial_finished_meanwhile_is_left_alone(study, monkeypatch):
    trial = study.ask()
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", dead_pid())
    seen_running = study.get_trials(deepcopy=False)
    study.tell(trial, [1.0, 0.5])  # its process finished it after the sweep looked
    monkeypatch.setattr(study, "get_trials", lambda **kwargs: seen_running)
    assert fail_stale_trials(study, journal=True) == []
    monkeypatch.undo()
    assert study.trials[trial.number].state.name == "COMPLETE"


@pytest.mark.parametrize("name", ["../../escape", "a/b", "..", ".hidden", "-x", "", "x" * 101])
def test_a_study_name_is_one_safe_folder_name(name):
    with pytest.raises(UserInputError, match="not a path"):
        check_study_name(name)


def test_worker_seeds_differ_between_processes():
    code = "from precsearch.study.options import worker_seed; print(worker_seed())"
    seeds = {int(subprocess.run([sys.executable, "-c", code], **TEXT).stdout) for _ in range(3)}
    assert len(seeds | {worker_seed()}) == 4


def test_a_reader_never_sees_half_a_file(tmp_path):
    path = tmp_path / "model_info.json"
    write_text_atomic(path, json.dumps({"n": 0, "pad": "x" * 200_000}))
    stop, seen, bad = threading.Event(), [], []

    def read():
        while not stop.is_set():
            try:
                seen.append(json.loads(path.read_text())["n"])
            except json.JSONDecodeError as exc:
                bad.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    # Writes go on until the reader has read many times while they went on, however the
    # threads are scheduled (a generous deadline, not a figure the test depends on).
    n, deadline = 0, time.monotonic() + 120
    while (n < 200 or len(set(seen)) < 20) and time.monotonic() < deadline:
        n += 1
        write_text_atomic(path, json.dumps({"n": n, "pad": "x" * 200_000}))
    stop.set()
    reader.join()
    assert not bad
    assert len(set(seen)) >= 20, "the reader read too little to tell"
    assert [p.name for p in tmp_path.iterdir()] == ["model_info.json"]  # no temporaries left


def test_a_shared_study_keeps_its_extra_exporters_for_finish(tmp_path):
    storage = open_storage(None, tmp_path)
    options = SearchOptions(exporters=["onnx", "tflite=int8"], objectives=["memory"])
    # What `precsearch run` stores in a new study (app/run.py), and what `precsearch
    # finish` and `worker` read back from a fresh handle on the storage.
    open_study("s", storage).set_user_attr("options", {**options.shared(), "dtypes": ["float32"]})
    stored = stored_options(open_study("s", open_storage(None, tmp_path)), confirm_top=3)
    assert stored.exporters == ["onnx", "tflite=int8"]
    assert stored.objectives == ["memory"]
