"""The search space built from a model's info: which parameters a study offers."""

from __future__ import annotations

import pytest

from precsearch.study.space import SearchSpace, SpaceOptions

keras = pytest.importorskip("keras")


def test_building_a_space_leaves_the_options_it_was_given_alone():
    info = {
        "layers": [
            {"id": "hidden", "name": "hidden", "class": "Dense", "params": 10, "output": False,
             "container": False, "floating": True},
            {"id": "logits", "name": "logits", "class": "Dense", "params": 10, "output": True,
             "container": False, "floating": True},
        ],
        "batch_size": 32,
        "gpus": [],
    }  # fmt: skip
    options = SpaceOptions()
    space = SearchSpace(info, options)
    assert options == SpaceOptions()  # dtypes still "this machine's", no notes added
    assert space.dtypes[0] == "float32" and len(space.dtypes) >= 2


def test_a_layer_holding_layers_is_one_parameter():
    from test_policy import vit_like

    from precsearch.policy.layers import model_layers

    info = {"layers": model_layers(vit_like()), "batch_size": 32, "gpus": []}
    space = SearchSpace(info, SpaceOptions(group_by="type", dtypes=["float32", "bfloat16"]))
    params = sorted(p for p in space.choices() if p.startswith("dtype"))
    assert params == ["dtype:PatchEncoder"]  # Flatten follows it
    layers = SearchSpace(info, SpaceOptions(group_by="layer", dtypes=["float32", "bfloat16"]))
    assert sorted(p for p in layers.choices() if p.startswith("dtype")) == ["dtype:encoder"]


def info_with(optimizer: str) -> dict:
    from precsearch.testing import sample_model_info

    return {**sample_model_info(), "optimizer": optimizer}


def test_the_learning_rate_follows_the_batch_size_as_a_user_of_the_optimizer_would():
    options = SpaceOptions(dtypes=["float32", "bfloat16"])
    adam = SearchSpace(info_with("Adam"), options, ["layer_dtypes", "batch_size"])
    sgd = SearchSpace(info_with("SGD"), options, ["layer_dtypes", "batch_size"])
    asked = SearchSpace(
        info_with("Adam"), SpaceOptions(dtypes=["float32", "bfloat16"], lr_rule="linear"),
        ["layer_dtypes", "batch_size"],
    )  # fmt: skip
    params = {p: v[0] for p, v in adam.choices().items()}
    assert adam.policy(params).lr_rule == "sqrt" and "Adam" in adam.lr_rule_why
    assert sgd.policy(params).lr_rule == "linear"
    assert asked.policy(params).lr_rule == "linear"


def test_a_twin_is_fp32_at_the_same_batch_size():
    space = SearchSpace(
        info_with("Adam"), SpaceOptions(dtypes=["float32", "bfloat16"]),
        ["layer_dtypes", "batch_size"],
    )  # fmt: skip
    params = {p: "bfloat16" if p.startswith("dtype") else 64 for p in space.choices()}
    twin = space.twin(params)
    assert twin == {p: "float32" if p.startswith("dtype") else 64 for p in params}
    assert space.twin(twin) is None
