from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from precsearch import Policy
from precsearch.records import Budget
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
def test_hang_times_out_in_seconds(tmp_path):
    with worker(tmp_path, "hang") as w:
        assert w.run_trial(Policy()).status == "ok"  # also caches the FP32 reference
        first_pid = w.pid
        t0 = time.perf_counter()
        hung = w.run_trial(BF16, timeout=4)
        assert time.perf_counter() - t0 < 15
        assert hung.status == "failed" and hung.reason == "timeout"
        assert not alive(first_pid)
        assert w.run_trial(Policy()).status == "ok"


@pytest.mark.slow
def test_five_trials_one_import_and_out_of_memory_is_a_failed_trial(tmp_path):
    with worker(tmp_path, "oom") as w:
        results = [w.run_trial(Policy()) for _ in range(2)]
        oom = w.run_trial(BF16)
        results += [w.run_trial(Policy()) for _ in range(2)]
        assert oom.status == "failed" and oom.reason == "out of memory"
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
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 10
        while alive(worker_pid) and time.time() < deadline:
            time.sleep(0.1)
        assert not alive(worker_pid)
    finally:
        parent.kill()


@pytest.mark.slow
def test_worker_memory_stays_bounded_over_many_trials(tmp_path):
    """TensorFlow keeps a few MiB of every traced training step: the worker gives back
    what it can after each trial and is restarted once it grew past the bound."""
    policies = [Policy(), Policy(default="mixed_bfloat16")]
    with Worker(MODELS / "mlp.py", tmp_path / "work", budget=BUDGET, max_growth=0.01) as w:
        results = [w.run_trial(policies[i % 2]) for i in range(8)]
    assert all(r.status == "ok" for r in results), [r.reason for r in results]
    rss = [r.numerics["rss_after_mb"] for r in results]
    recycled = [i for i, r in enumerate(results) if "worker_recycled" in r.numerics]
    print(f"\nworker RSS after each trial (MiB): {[round(x) for x in rss]}; restarted after "
          f"trials {recycled}")  # fmt: skip
    assert recycled and w.started == len(recycled) + (recycled[-1] < 7)
    # Each worker's figures stay within the bound (plus one trial's growth) of its first.
    first = rss[0]
    for i, value in enumerate(rss):
        if i and i - 1 in recycled:
            first = value
        assert value < first * 1.01 + 10, (i, rss)
