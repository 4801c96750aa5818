from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The probes before each search cost seconds of timed rounds a study: tests that are not
# about them go without (tests/test_probe.py runs them; the README's example in CI too).
os.environ["PRECSEARCH_PROBE_TIME"] = "0"
# Timed blocks of 0.1 s, not 0.5: the tests' studies time tiny models to check what the
# search does, not how precisely it measures (test_instrument and test_selection do that
# on fake clocks and simulated rounds). A tiny test study took 110 s at 0.5 s, 41 s here.
os.environ["PRECSEARCH_BLOCK_TIME"] = "0.1"

import pytest
from helpers import MODELS, run_cli

FIGURES: list[str] = []


@pytest.fixture
def figure():
    """Print a line at the end of the run, passed or not: figures CI must show."""
    return FIGURES.append


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("precsearch figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory):
    """The shared tiny study: 3 trials, then 3 more resumed under the same name.

    Only the resumed run confirms and reports the answer (what its users read); no test
    of it is about the quality test's power, so it judges against 3 FP32 runs, not 8.

    Returns (study folder, first run, second run).
    """
    out = tmp_path_factory.mktemp("studies")
    args = [
        "run",
        str(MODELS / "mlp.py"),
        "--study-name",
        "tiny",
        "--out",
        str(out),
        "--steps",
        "20",
        "--dtypes",
        "float32,bfloat16",
        "--sampler",
        "random",
        "--confirm-time",
        "1",
        "--fp32-runs",
        "3",
    ]
    first = run_cli(*args, "--trials", "3", "--confirm", "0")
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_cli(*args, "--trials", "3")
    assert second.returncode == 0, second.stderr[-3000:]
    return out / "tiny", first, second
