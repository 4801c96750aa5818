"""Smoke tests: every example study runs a couple of trials, so none goes stale."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import precsearch

STUDIES = Path(__file__).parents[1] / "studies"
EXAMPLES = sorted(p.name for p in STUDIES.iterdir() if (p / "model.py").exists())


def test_every_example_has_a_readme_that_says_how_to_run_it():
    assert "wide_mlp" in EXAMPLES  # the README's own example
    for name in EXAMPLES:
        lines = (STUDIES / name / "README.md").read_text().splitlines()
        assert lines[0] == f"# {name}", name
        assert any(line.startswith(f"precsearch run studies/{name}/model.py") for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in EXAMPLES if n != "overflow_trap"])
def test_example_runs(name, tmp_path):
    # One trial (the FP32 baseline) exercises the whole file: build, data, train,
    # validation. More would mostly add tracing (MobileNetV2: ~12 s a model).
    result = precsearch.search(
        str(STUDIES / name / "model.py"),
        trials=1,
        steps=10,
        dtypes="float32,bfloat16",
        out=str(tmp_path),
        in_process=True,
        confirm_top=0,
        fp32_runs=3,  # the file is the subject, not the quality test's power
    )
    frame = result.trials
    fp32 = frame[frame["baseline"] == "fp32"].iloc[0]
    assert fp32["status"] == "ok", fp32["reason"]
    # Every example has validation data, and FP32's validation loss is a number.
    val = result.reference.val
    assert math.isfinite(val["loss"]), val


@pytest.mark.slow
def test_overflow_trap_rejects_global_float16(tmp_path):
    result = precsearch.search(
        str(STUDIES / "overflow_trap" / "model.py"),
        trials=3,
        steps=12,
        group_by="layer",
        out=str(tmp_path),
        in_process=True,
        confirm_top=0,
        watchdog=1000.0,
        keep_slow=True,  # float16 is emulated on CPUs: it must train to its NaN here
    )
    trials = {t.user_attrs.get("baseline"): t for t in result.study.trials}
    assert trials["fp32"].user_attrs["status"] == "ok"
    global_fp16 = trials["global_float16"]
    assert global_fp16.user_attrs["status"] == "infeasible", global_fp16.user_attrs["reason"]
    for trial in result.study.best_trials:  # every feasible policy keeps the trap float32
        assert trial.params.get("dtype:naive_softmax", "float32") == "float32"
