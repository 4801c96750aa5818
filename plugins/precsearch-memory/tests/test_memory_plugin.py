from __future__ import annotations

from pathlib import Path

import pytest
from precsearch_memory import MemoryCap, PeakMemory, parse_mib

import precsearch
from precsearch.testing import ObjectiveContract, sample_result

MLP = Path(__file__).parents[3] / "tests" / "models" / "mlp.py"


class TestPeakMemory(ObjectiveContract):
    plugin_class = PeakMemory


class TestPeakMemoryWithCap(ObjectiveContract):
    plugin_class = PeakMemory
    arg = "4GB"


class TestMemoryCap(ObjectiveContract):
    plugin_class = MemoryCap
    arg = "2048"


def test_parse_and_constraint():
    assert parse_mib("2048") == 2048 and parse_mib("2GB") == 2048 and parse_mib("1.5GiB") == 1536
    with pytest.raises(precsearch.UserInputError):
        parse_mib("lots")
    result = sample_result("ok")  # peak 812.5 MiB
    assert MemoryCap("1GB").constraint(result, None) < 0
    assert MemoryCap("512").constraint(result, None) > 0
    with pytest.raises(precsearch.UserInputError, match="needs a size"):
        MemoryCap()


@pytest.mark.slow
def test_memory_objective_and_cap_in_a_study(tmp_path):
    result = precsearch.search(
        str(MLP),
        trials=2,
        steps=20,
        dtypes="float32,bfloat16",
        out=str(tmp_path),
        objectives=["peak_memory", "memory_cap=1MB"],
        in_process=True,
        confirm_top=0,
    )
    study = result.study
    assert len(study.directions) == 3
    for trial in study.trials:
        assert trial.values[2] > 1  # MiB
        assert trial.constraints["memory_cap"] > 0  # nothing fits in 1 MiB
    assert result.pareto.empty  # so nothing is feasible
