from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from precsearch import Policy
from precsearch.records import Budget, TrialResult
from precsearch.study.executors import Worker

MODELS = Path(__file__).parent / "models"
BUDGET = Budget(steps=20, warmup=2, block=5)
BF16 = Policy(default="mixed_bfloat16")


def worker(tmp_path, fault, **kwargs):
    return Worker(
        MODELS / "faulty.py",
        work_dir=tmp_path / "work",
        budget=BUDGET,
        env={"PRECSEARCH_FAULT": fault},
        **kwargs,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited all the same.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "zombie" in status.read_text())


@pytest.mark.slow
def test_abort_fails_that_trial_and_a_fresh_worker_takes_the_next(tmp_path):
    with worker(tmp_path, "abort") as w:
        crashed = w.run_trial(BF16)
        assert crashed.status == "failed"
        assert "SIGABRT" in crashed.reason
        fine = w.run_trial(Policy())
        assert fine.status == "ok", fine.reason
        assert w.started == 2


@pytest.mark.slow
def test_hang_times_out_in_seconds(tmp_path, monkeypatch):
    waits = []  # the seconds the study waited for each reply
    wait_for_reply = select.select

    def waiting(*args):
        waits.append(args[3])
        return wait_for_reply(*args)

    monkeypatch.setattr(select, "select", waiting)
    with worker(tmp_path, "hang") as w:
        assert w.run_trial(Policy()).status == "ok"  # also caches the FP32 reference
        first_pid = w.pid
        waits.clear()
        hung = w.run_trial(BF16, timeout=4)
        # One wait, of the trial's 4 s (not the worker's default), and nothing after it.
        assert waits == [4]
        assert hung.status == "failed" and hung.reason == "timeout"
        assert hung.numerics["detail"] == "no answer after 4 s while running a trial"
        assert not alive(first_pid)
        assert w.run_trial(Policy()).status == "ok"


@pytest.mark.slow
def test_five_trials_one_import_and_out_of_memory_is_a_failed_trial(tmp_path):
    with worker(tmp_path, "oom") as w:
        results = [w.run_trial(Policy()) for _ in range(2)]
        oom = w.run_trial(BF16)
        results += [w.run_trial(Policy()) for _ in range(2)]
        assert oom.status == "failed" and oom.reason == "out of memory at batch 32"
        assert all(r.status == "ok" for r in results)
        pids = {r.numerics["worker_pid"] for r in [*results, oom] if "worker_pid" in r.numerics}
        assert pids == {w.pid} and w.started == 1
        imports = [r.timings["import"] for r in results]
        assert imports[0] > 0.5 and imports[1:] == [0.0, 0.0, 0.0]
        first = results[0].timings
        assert {"worker_start", "import", "setup", "build", "trace", "measured"} <= set(first)


@pytest.mark.slow
def test_worker_exits_when_its_parent_is_killed(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, time
        from precsearch.study.executors import Worker
        from precsearch.records import Budget
        w = Worker({str(MODELS / "faulty.py")!r}, work_dir={str(tmp_path / "work")!r},
                   budget=Budget(steps=20, warmup=2, block=5))
        w.start()
        print(w.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(parent.stdout.readline())
        assert alive(worker_pid)
        exited = os.pidfd_open(worker_pid)  # readable once the worker has exited
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        # Blocks until it exits: a worker that outlives its parent fails by pytest's
        # timeout, not by a guess of how long exiting takes.
        select.select([exited], [], [])
        os.close(exited)
        assert not alive(worker_pid)
    finally:
        parent.kill()


def test_a_worker_is_restarted_once_its_memory_grew_past_the_bound(tmp_path, monkeypatch):
    """TensorFlow keeps a few MiB of every traced training step: the worker is restarted
    after a trial once its resident memory grew by more than ``max_growth`` since its
    first (figures made up here; the real restart is the test below)."""
    w = Worker(MODELS / "mlp.py", tmp_path / "work", budget=BUDGET, max_growth=0.1)
    closed = []
    monkeypatch.setattr(w, "close", lambda: closed.append(True))
    results = []
    for rss in (500.0, 540.0, 550.0, 551.0):
        result = TrialResult(policy=Policy().to_dict(), status="ok")
        result.numerics["rss_after_mb"] = rss
        w._recycle_if_grown(result)
        results.append(result)
    recycled = [r.numerics.get("worker_recycled") for r in results]
    assert recycled == [None, None, None, "500 -> 551 MiB"]  # 550 is 10%, not past it
    assert closed == [True]


@pytest.mark.slow
def test_a_worker_past_its_memory_bound_is_restarted_between_trials(tmp_path):
    # A bound every second trial passes (any resident memory is more than 0 x the
    # first): each worker runs two trials, and the next trial starts a fresh one.
    with Worker(MODELS / "mlp.py", tmp_path / "work", budget=BUDGET, max_growth=-1.0) as w:
        results = [w.run_trial(Policy()) for _ in range(4)]
        assert w.started == 2 and w.pid is None  # closed after the fourth, not restarted
    assert all(r.status == "ok" for r in results), [r.reason for r in results]
    assert ["worker_recycled" in r.numerics for r in results] == [False, True, False, True]
    pids = [r.numerics["worker_pid"] for r in results]
    assert pids[0] == pids[1] != pids[2] == pids[3]
    assert all(r.numerics["rss_after_mb"] > 0 for r in results)


class _Started(Exception):
    """Raised by a stand-in for Popen once it has seen how the worker would start."""


def child_start(tmp_path, monkeypatch, **kwargs) -> dict:
    """The keyword arguments a Worker gives ``subprocess.Popen`` for its child."""
    seen = {}

    def popen(args, **popen_kwargs):
        seen.update(popen_kwargs, args=args)
        raise _Started

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(_Started):
        Worker(MODELS / "mlp.py", work_dir=tmp_path / "work", **kwargs).start()
    return seen


def test_the_worker_quiets_tensorflows_start_up_logs_unless_asked(tmp_path, monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    quiet = child_start(tmp_path, monkeypatch)
    assert quiet["args"][-2:] == ["-m", "precsearch.engine.serve"]
    assert quiet["env"]["TF_CPP_MIN_LOG_LEVEL"] == "2"  # warnings and notices left out
    # Its output is kept for the messages of a crash, away from the progress lines.
    assert quiet["stdout"] is quiet["stderr"] and quiet["stderr"] not in (None, 2)
    # --debug: TensorFlow's own default level, on this process's stderr.
    loud = child_start(tmp_path, monkeypatch, debug=True)
    assert "TF_CPP_MIN_LOG_LEVEL" not in loud["env"]
    assert loud["stdout"] == 2 and loud["stderr"] is None
    # A level the user set is theirs, in either mode.
    for debug in (False, True):
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
        assert child_start(tmp_path, monkeypatch, debug=debug)["env"]["TF_CPP_MIN_LOG_LEVEL"] == "1"
        monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
        given = child_start(tmp_path, monkeypatch, debug=debug, env={"TF_CPP_MIN_LOG_LEVEL": "0"})
        assert given["env"]["TF_CPP_MIN_LOG_LEVEL"] == "0"


@pytest.mark.parametrize(
    ("argv", "debug"),
    [
        (["run", "model.py"], False),
        (["run", "model.py", "--debug"], True),
        (["--debug", "run", "model.py"], True),
    ],
)
def test_debug_asks_run_for_the_workers_logs(argv, debug):
    from precsearch.cli.parser import build_parser, run_options

    args = build_parser().parse_args(argv)
    assert args.debug is debug and run_options(args).debug is debug
    assert "debug" not in run_options(args).shared()  # this process's, not the study's
