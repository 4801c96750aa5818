"""The cast-aware space: which layers get a dtype choice, and the "follow" rule that
lets shape and element-wise layers take their input's dtype (no casts of their own)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from precsearch import Policy, UserInputError, load_policy
from precsearch.app.run import space_for
from precsearch.cli.commands import run_options
from precsearch.cli.parser import build_parser
from precsearch.policy.layers import iter_layers, model_layers
from precsearch.study.space import SearchSpace, SpaceOptions

keras = pytest.importorskip("keras")

BF16 = "mixed_bfloat16"


def small_cnn() -> keras.Model:
    """Preprocessing, a conv block with a residual add, and a softmax head: every kind."""
    inputs = keras.Input((12, 12, 3), name="image")
    x = keras.layers.Rescaling(1 / 255, name="scale")(inputs)
    x = keras.layers.RandomFlip(name="flip")(x)
    x = keras.layers.ZeroPadding2D(name="pad")(x)
    x = keras.layers.Conv2D(8, 3, name="conv")(x)
    x = keras.layers.BatchNormalization(name="bn")(x)
    y = keras.layers.ReLU(name="relu")(x)
    z = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(y)
    x = keras.layers.Add(name="add")([y, z])
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    x = keras.layers.Dense(16, name="hidden")(x)
    x = keras.layers.Activation("softmax", name="attn_weights")(x)
    x = keras.layers.Activation("relu", name="act")(x)
    outputs = keras.layers.Dense(10, name="logits")(x)
    return keras.Model(inputs, outputs, name="small_cnn")


def test_layers_are_sorted_by_whether_their_dtype_is_worth_a_choice():
    records = {record.id: record for record, _ in iter_layers(small_cnn())}
    kinds = {layer_id: record.kind for layer_id, record in records.items()}
    assert kinds == {
        "scale": "preprocess", "flip": "preprocess", "pad": "follow", "conv": "compute",
        "bn": "follow", "relu": "follow", "dw": "compute", "add": "follow", "pool": "follow",
        "hidden": "compute", "attn_weights": "sensitive", "act": "follow", "logits": "compute",
    }  # fmt: skip
    assert records["add"].inputs == ("relu", "dw")
    assert records["scale"].inputs == ()  # fed by the model's input


def test_follow_layers_take_their_inputs_dtype():
    model = small_cnn()
    policy = Policy(
        types={"Conv2D": BF16, "DepthwiseConv2D": BF16, "Dense": BF16, "ZeroPadding2D": "follow",
               "BatchNormalization": "follow", "ReLU": "follow", "Add": "follow",
               "GlobalAveragePooling2D": "follow", "Activation": "follow"},
    )  # fmt: skip
    got = policy.assignments(model)
    # The padding is fed by float32 preprocessing; everything after the conv follows it.
    assert got["pad"] == "float32"
    assert got["bn"] == got["relu"] == got["add"] == got["pool"] == BF16
    # The softmax follows too when a rule says so; the output layer stays float32.
    assert got["attn_weights"] == got["act"] == BF16 and got["logits"] == "float32"
    # Inputs that disagree make a follower float32 (a rule never lowers a float32 path).
    mixed = Policy(types={**policy.types, "DepthwiseConv2D": "float32"}).assignments(model)
    assert mixed["add"] == "float32" and mixed["relu"] == BF16
    # The decision names the rule and that it was followed.
    walked = [record for record, _ in iter_layers(model)]
    rules = dict(zip([r.id for r in walked], policy.decide(walked), strict=True))
    assert rules["relu"] == (BF16, "types['ReLU'] follow")


def test_a_follow_policy_trains_with_no_cast_between_a_conv_and_its_activation():
    model = small_cnn()
    policy = Policy(types={"Conv2D": BF16, "BatchNormalization": "follow", "ReLU": "follow"})
    policy.compile(model, optimizer="adam", loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0, 255, size=(16, 12, 12, 3)).astype("float32"), rng.integers(0, 10, 16)
    history = model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    assert np.isfinite(history.history["loss"][-1])
    assert model.get_layer("relu").compute_dtype == "bfloat16"
    assert model.get_layer("dw").compute_dtype == "float32"


def test_follow_is_format_2_and_version_1_files_still_load(tmp_path):
    plain = Policy(types={"Dense": BF16})
    assert plain.to_dict()["format"] == "precsearch.policy/1"
    follow = Policy(types={"Dense": BF16, "ReLU": "follow"})
    path = follow.save(tmp_path / "follow.json")
    assert json.loads(path.read_text())["format"] == "precsearch.policy/2"
    assert load_policy(path) == follow
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format": "precsearch.policy/1", "default": BF16}))
    assert load_policy(old) == Policy(default=BF16)
    with pytest.raises(UserInputError, match="default"):
        Policy(default="follow")  # the default must be a dtype: nothing to follow from


def info_of(model) -> dict:
    return {"layers": model_layers(model), "batch_size": 32, "train_examples": 1000, "gpus": []}


def space_of(info: dict, **options) -> SearchSpace:
    options = SpaceOptions(dtypes=["float32", "bfloat16"], **options)
    return SearchSpace(info, options, ["layer_dtypes"])


def parse(argv: list[str]):
    return build_parser().parse_args(argv)


def dtype_params(space: SearchSpace) -> list[str]:
    return sorted(p for p in space.choices() if p.startswith("dtype"))


def test_the_cast_aware_space_offers_a_choice_only_where_layers_compute():
    info = info_of(small_cnn())
    space = space_of(info, group_by="type")
    assert dtype_params(space) == ["dtype:Conv2D", "dtype:Dense", "dtype:DepthwiseConv2D"]
    low = space.policy({p: "bfloat16" for p in dtype_params(space)})
    assert low.types["ReLU"] == "follow" and "Rescaling" not in low.types
    # The softmax Activation is kept float32 by name among Activations that follow.
    assert low.types["Activation"] == "follow" and low.layers["attn_weights"] == "float32"
    # All float32 stays plainly FP32: no follow rules beside nothing to follow.
    assert space.policy({p: "float32" for p in dtype_params(space)}).types == {
        "Conv2D": "float32", "DepthwiseConv2D": "float32", "Dense": "float32"
    }  # fmt: skip
    sensitive = space_of(info, group_by="type", sensitive=True)
    assert "dtype:Activation" in dtype_params(sensitive)
    # A run reaches the opt-in with --sensitive (a notebook with sensitive=True).
    flags = ["run", "m.py", "--sensitive", "--dtypes", "float32,bfloat16", "--group-by", "type"]
    reached = space_for(SimpleNamespace(to_dict=lambda: info), run_options(parse(flags)))
    assert dtype_params(reached) == dtype_params(sensitive)
    independent = space_of(info, group_by="type", casts="independent")
    assert len(dtype_params(independent)) == 11  # every floating class, RandomFlip included
    assert "casts" in space.describe() and "casts" not in independent.describe()


def test_the_global_choice_in_the_cast_aware_space_leaves_softmax_and_input_float32():
    model = small_cnn()
    space = space_of(info_of(model), group_by="global")
    assert dtype_params(space) == ["dtype"]
    got = space.policy({"dtype": "bfloat16"}).assignments(model)
    assert got["conv"] == got["relu"] == got["hidden"] == BF16
    assert got["scale"] == got["pad"] == got["attn_weights"] == got["logits"] == "float32"
    assert got["act"] == "float32"  # it follows the softmax


def test_mobilenet_v2_offers_its_convolutions_only():
    model = keras.applications.MobileNetV2(
        weights=None, alpha=0.35, input_shape=(96, 96, 3), classes=10
    )
    space = space_of(info_of(model), group_by="type")
    assert dtype_params(space) == ["dtype:Conv2D", "dtype:DepthwiseConv2D"]
    got = space.policy({"dtype:Conv2D": "bfloat16", "dtype:DepthwiseConv2D": "float32"})
    assigned = got.assignments(model)
    # A BatchNormalization and ReLU after a bfloat16 Conv2D stay in bfloat16; after a
    # float32 depthwise one, in float32.
    assert assigned["block_1_expand_BN"] == assigned["block_1_expand_relu"] == BF16
    assert assigned["block_1_depthwise_BN"] == assigned["block_1_depthwise_relu"] == "float32"
