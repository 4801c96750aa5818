"""The fault matrix: inject every fault a study meets, and prove that nothing is lost.

Each case is a real run of ``precsearch`` (a real worker, a real journal or PostgreSQL
storage). The last line printed is the summary the README quotes:
``faults: injected N, survived N, completed trials lost 0, duplicate trials 0``.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from helpers import MODELS, PostgresServer, run_cli

from precsearch.study.storage import open_storage

pytestmark = pytest.mark.slow

FAULTS_MODEL = MODELS / "faults.py"
LAYERS = ("hidden", "nan", "overflow", "abort", "segfault", "hang", "memory", "bf16_death")
NO_TENSORFLOW = Path(__file__).parent / "data" / "no_tensorflow"
SECRET = "s3cret-pw"

# Enqueued in this order after the three baselines; what each must end as.
INJECTED = [
    ("nan", "bfloat16", "COMPLETE", "non-finite loss"),
    ("abort", "bfloat16", "FAIL", "SIGABRT"),
    ("hang", "bfloat16", "FAIL", "interrupted: its run was killed"),  # SIGKILLed study
    ("overflow", "float16", "COMPLETE", "non-finite loss"),
    ("segfault", "bfloat16", "FAIL", "SIGSEGV"),
    ("memory", "bfloat16", "FAIL", "out of memory"),
    ("bf16_death", "bfloat16", "FAIL", "SIGKILL"),
    ("hang", "bfloat16", "FAIL", "timeout"),
]


class Matrix:
    """Collects each case's outcome; the test fails at the end if any did not survive."""

    def __init__(self) -> None:
        self.cases: list[tuple[str, bool, str]] = []
        self.lost = 0
        self.duplicates = 0

    def case(self, name: str, survived: bool, detail: str = "") -> None:
        self.cases.append((name, bool(survived), detail))

    def summary(self) -> str:
        survived = sum(ok for _, ok, _ in self.cases)
        return (
            f"faults: injected {len(self.cases)}, survived {survived}, completed trials lost "
            f"{self.lost}, duplicate trials {self.duplicates}"
        )


def one_clear_line(done: subprocess.CompletedProcess, code: int, *words: str) -> bool:
    """Exit ``code``, no traceback, and a last stderr line that says what happened."""
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    return (
        done.returncode == code
        and "Traceback" not in done.stderr
        and last.startswith("precsearch: error: ")
        and all(word in last for word in words)
    )


def fault_params(layer: str, dtype: str) -> dict:
    params = {f"dtype:{name}": "float32" for name in LAYERS}
    params[f"dtype:{layer}"] = dtype
    return {
        **params,
        "batch_size": 32,
        "jit_compile": False,
        "loss_scale": "dynamic",
        "loss_scale_log2": 15,
        "loss_scale_growth": 2000,
    }


def states(study) -> list[tuple[int, str, bool]]:
    """(number, state, recorded its process) of each trial."""
    return [(t.number, t.state.name, "pid" in t.user_attrs) for t in study.get_trials()]


# Wall-clock seconds a trial, a confirmation or an export may take: generous, so that a
# loaded machine never times out real work. The one trial meant to time out runs alone
# with HANG_TIMEOUT (anything it does before it hangs may be cut short all the same).
TRIAL_TIMEOUT = "300"
HANG_TIMEOUT = "5"


def wait_for(condition, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.25)


def test_fault_matrix(tmp_path, figure):
    matrix = Matrix()
    journal_cases(matrix, tmp_path / "journal")
    input_cases(matrix, tmp_path / "inputs")
    postgres_cases(matrix, tmp_path / "pg")
    for name, ok, detail in matrix.cases:
        print(f"  {'survived' if ok else 'FAILED  '} {name}: {detail[:160]}")
    figure(matrix.summary())
    assert all(ok for _, ok, _ in matrix.cases), [c for c in matrix.cases if not c[1]]
    assert matrix.lost == 0 and matrix.duplicates == 0


def journal_cases(matrix: Matrix, out: Path) -> None:
    """Trial faults through a worker, a study SIGKILLed mid-trial and resumed, and a study
    folder that breaks or fills while exporting."""
    args = [
        "run", str(FAULTS_MODEL), "--study-name", "faults", "--out", str(out),
        "--steps", "20", "--dtypes", "float32,bfloat16,float16", "--group-by", "layer",
        "--trial-timeout", TRIAL_TIMEOUT,
        # Every fault layer its own choice: weightless, they would follow their input.
        "--casts", "independent",
        "--fp32-runs", "3",  # the faults are the subject, not the quality test's power
    ]  # fmt: skip
    made = run_cli(*args, "--trials", "0", "--confirm", "0")
    assert made.returncode == 0, made.stderr[-2000:]
    folder = out / "faults"
    study = optuna.load_study(study_name="faults", storage=open_storage(None, folder))
    for layer, dtype, _, _ in INJECTED:
        study.enqueue_trial(fault_params(layer, dtype), user_attrs={"injected": layer})

    # Run until the first hang is running, then SIGKILL the whole study mid-trial.
    with open(out / "run.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "precsearch", *args, "--trials", "11", "--confirm", "0"],
            stdout=log,
            stderr=log,
        )
        try:
            hang = 3 + 2  # three baselines, then nan, abort, hang

            def hanging() -> bool:
                # Its parameters stored too: the duplicate count below compares them.
                trials = study.get_trials(deepcopy=False)
                return (hang, "RUNNING", True) in states(study) and bool(trials[hang].params)

            wait_for(hanging)
            completed = {n for n, state, _ in states(study) if state == "COMPLETE"}
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            proc.kill()
    # Resumed: the injected trials up to the last hang (the broken export below confirms).
    resumed = run_cli(*args, "--trials", "4", "--confirm", "0")
    matrix.case(
        "journal study SIGKILLed mid-trial, resumed",
        resumed.returncode == 0 and "marked trials [5] failed" in resumed.stdout,
        resumed.stderr[-300:],
    )
    # The last hang alone, under a short timeout (the last --trial-timeout counts).
    timed_out = run_cli(*args, "--trial-timeout", HANG_TIMEOUT, "--trials", "1", "--confirm", "0")
    assert timed_out.returncode == 0, timed_out.stderr[-2000:]
    trials = study.get_trials()
    matrix.lost += len(completed - {t.number for t in trials if t.state.name == "COMPLETE"})
    for label, reason in (("global_bfloat16", "SIGABRT"), ("global_float16", "SIGABRT")):
        trial = next(t for t in trials if t.user_attrs.get("baseline") == label)
        matrix.case(f"{label} crashes", reason in trial.user_attrs.get("reason", ""))
    injected = [t for t in trials if "injected" in t.user_attrs]
    for trial, (layer, dtype, state, reason) in zip(injected, INJECTED, strict=True):
        got = f"{trial.state.name}: {trial.user_attrs.get('reason', '')}"
        matrix.case(
            f"{layer} in {dtype}",
            trial.state.name == state and reason in trial.user_attrs.get("reason", ""),
            got,
        )
    finished = [t for t in trials if t.state.name != "WAITING"]
    keys = [tuple(sorted(t.params.items())) + (t.user_attrs.get("injected"),) for t in finished]
    # The two hang trials share their parameters on purpose; nothing else may repeat.
    matrix.duplicates += len(keys) - len(set(keys)) - 1
    matrix.duplicates += len(finished) - len({t.number for t in finished})

    # The study folder breaks while exporting: a directory where the policy file goes.
    before = [(t.number, t.state.name) for t in study.get_trials()]
    (folder / "best_policy.json").unlink(missing_ok=True)
    (folder / "best_policy.json").mkdir()
    (folder / "best_policy.json" / "keep").write_text("x")
    broken = run_cli(*args, "--trials", "0", "--confirm", "1", "--confirm-time", "1")
    after = [(t.number, t.state.name) for t in study.get_trials()]
    matrix.case(
        "study folder unwritable when exporting",
        one_clear_line(broken, 1, "export failed", "the study and its") and before == after,
        broken.stderr.strip().splitlines()[-1] if broken.stderr.strip() else "",
    )
    # A full disk when exporting to another folder (a file-size limit of one byte).
    journal = folder / "study.journal"
    size = journal.stat().st_size
    full = subprocess.run(
        [sys.executable, "-m", "precsearch", "export", str(folder), "--to", str(out / "copy")],
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1, 1)),
    )
    matrix.case(
        "disk full when exporting",
        one_clear_line(full, 1, "File too large") and journal.stat().st_size == size,
        full.stderr.strip()[-200:],
    )


def input_cases(matrix: Matrix, out: Path) -> None:
    """What is wrong before any trial: no TensorFlow, no memory to build the model."""
    env = {**os.environ, "PYTHONPATH": str(NO_TENSORFLOW)}
    no_tf = subprocess.run(
        [sys.executable, "-m", "precsearch", "run", str(MODELS / "mlp.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    matrix.case(
        "TensorFlow not installed",
        one_clear_line(no_tf, 2, "'tensorflow'", "pip install 'precsearch[cpu]'")
        and len(no_tf.stderr.strip().splitlines()) == 1,
        no_tf.stderr.strip(),
    )
    out.mkdir(parents=True, exist_ok=True)
    model = out / "no_memory.py"
    model.write_text(
        "import numpy as np\n\n"
        "def build_model():\n    raise MemoryError('no room for the model')\n\n"
        "def train_data():\n    return np.zeros((8, 2), 'f'), np.zeros(8, 'f')\n"
    )
    oom = run_cli("run", str(model), "--out", str(out))
    matrix.case(
        "out of memory in build_model (not the user's fault: exit 1)",
        one_clear_line(oom, 1, "out of memory"),
        oom.stderr.strip()[-200:],
    )


def postgres_cases(matrix: Matrix, out: Path) -> None:
    """Storage faults on a real PostgreSQL: unreachable, a worker killed mid-trial, the
    server lost mid-study; and the password in the URL never shown."""
    unreachable = run_cli(
        "run", str(MODELS / "mlp.py"), "--out", str(out),
        "--storage", f"postgresql://postgres:{SECRET}@127.0.0.1:9/precsearch",
    )  # fmt: skip
    matrix.case(
        "storage unreachable at start",
        one_clear_line(unreachable, 2, "--storage", "cannot open")
        and len(unreachable.stderr.strip().splitlines()) == 1
        and SECRET not in unreachable.stderr + unreachable.stdout,
        unreachable.stderr.strip()[-200:],
    )
    server = PostgresServer(port=54330, password=SECRET)
    try:
        url = server.url
        args = [
            "run", str(MODELS / "faulty.py"), "--storage", url, "--study-name", "pg",
            "--out", str(out), "--steps", "20", "--dtypes", "float32,bfloat16",
            "--group-by", "global", "--trial-timeout", TRIAL_TIMEOUT, "--confirm", "0",
            "--fp32-runs", "3",
        ]  # fmt: skip
        env = {**os.environ, "PRECSEARCH_FAULT": "hang"}  # the global bfloat16 trial hangs
        with open(out.parent / "pg.log", "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "precsearch", *args, "--trials", "4"],
                stdout=log,
                stderr=log,
                env=env,
            )
            try:
                study = None

                def running(number: int) -> bool:
                    nonlocal study
                    try:
                        study = study or optuna.load_study(study_name="pg", storage=url)
                    except KeyError:
                        return False
                    return (number, "RUNNING", True) in states(study)

                wait_for(lambda: running(1))
                # The run's last two trials compute in float32 (no hang): it meets the lost
                # storage when it records one, not after a timeout.
                for batch_size in (64, 128):
                    study.enqueue_trial(
                        {"dtype": "float32", "batch_size": batch_size, "jit_compile": False}
                    )
                # The trial worker (a child of the run) is killed mid-trial.
                children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text()
                os.kill(int(children.split()[0]), signal.SIGKILL)
                wait_for(lambda: running(2))
                completed = {n for n, state, _ in states(study) if state == "COMPLETE"}
                server.stop()  # the storage goes away mid-study
                proc.wait(timeout=300)
            finally:
                proc.kill()
        log_text = (out.parent / "pg.log").read_text()
        last = log_text.strip().splitlines()[-1]
        matrix.case(
            "storage lost mid-study",
            proc.returncode == 1
            and last.startswith("precsearch: error: ")
            and "Traceback" not in log_text,
            last[-200:],
        )
        server.start()
        trials = optuna.load_study(study_name="pg", storage=url).get_trials()
        matrix.lost += len(completed - {t.number for t in trials if t.state.name == "COMPLETE"})
        killed = trials[1]
        matrix.case(
            "trial worker SIGKILLed mid-trial on PostgreSQL",
            killed.state.name == "FAIL" and "SIGKILL" in killed.user_attrs.get("reason", ""),
            killed.user_attrs.get("reason", ""),
        )
        shown = run_cli("show", "pg", "--storage", url, "--out", str(out))
        exported = run_cli("export", "pg", "--storage", url, "--to", str(out / "copy"))
        files = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
        texts = log_text + shown.stdout + shown.stderr + exported.stdout + exported.stderr + files
        matrix.case("storage password never shown or stored", SECRET not in texts)
    finally:
        server.close()
