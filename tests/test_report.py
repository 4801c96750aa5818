"""Text for people (results/report.py), from model info alone."""

from __future__ import annotations

from precsearch import Policy
from precsearch.results.report import assignments_summary, ttq_text


def layer(id_, cls, output=False, unit=None):
    name = id_.rsplit("/", 1)[-1]
    return {"id": id_, "name": name, "class": cls, "params": 1, "output": output,
            "container": False, "floating": True, "unit": unit}  # fmt: skip


def test_the_summary_names_the_output_layer_and_follows_units():
    layers = [
        layer("encoder", "PatchEncoder"),
        layer("encoder/projection", "Dense", unit="encoder"),
        layer("hidden", "Dense"),
        layer("logits", "Dense", output=True),
    ]
    policy = Policy(types={"Dense": "mixed_bfloat16"})
    # The Dense inside the encoder follows the encoder (float32); the output stays float32.
    assert assignments_summary(policy, layers) == [
        "Dense (3 layers): bf16 1, fp32 2 (output logits: fp32)",
        "PatchEncoder (1 layer): fp32 1",
    ]


def test_a_time_to_quality_is_a_ratio_or_its_named_outcome():
    assert ttq_text({"speedup": 1.234, "outcome": "reached"}) == "1.23x"
    assert ttq_text({"outcome": "not reached within 1.5x the budget"}) == ">1.5x budget"
    assert ttq_text({"outcome": "not measured"}) == ttq_text(None) == "n/a"
