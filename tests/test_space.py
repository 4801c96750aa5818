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
    assert params == ["dtype:Flatten", "dtype:PatchEncoder"]
    layers = SearchSpace(info, SpaceOptions(group_by="layer", dtypes=["float32", "bfloat16"]))
    assert sorted(p for p in layers.choices() if p.startswith("dtype")) == [
        "dtype:encoder",
        "dtype:flat",
    ]
