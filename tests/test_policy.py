from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import precsearch
from precsearch import LossScale, Policy, UserInputError, load_policy

keras = pytest.importorskip("keras")


def full_policy() -> Policy:
    return Policy(
        default="mixed_bfloat16",
        types={"DepthwiseConv2D": "float32"},
        layers={"block_1_.*": "float32", "predictions": "float32"},
        loss_scale=LossScale(dynamic=True, initial_scale=2**15, growth_steps=2000),
        batch_size=64,
        lr_rule="linear",
        base_batch_size=32,
        jit_compile=False,
        manifest={"confirmed": {"speedup_vs_fp32": {"median": 1.4, "min": 1.3, "max": 1.5}}},
    )


def test_round_trip(tmp_path):
    p = full_policy()
    path = p.save(tmp_path / "best_policy.json")
    q = load_policy(path)
    assert q == p
    assert q.manifest == p.manifest
    data = json.loads(path.read_text())
    assert data["format"] == "precsearch.policy/1"
    assert list(data["layers"]) == ["block_1_.*", "predictions"]


def test_lr_rule():
    p = Policy(batch_size=128, base_batch_size=32, lr_rule="linear")
    assert p.scaled_learning_rate(1e-3) == pytest.approx(4e-3)
    assert Policy(batch_size=128, base_batch_size=32, lr_rule="sqrt").scaled_learning_rate(
        1e-3
    ) == pytest.approx(2e-3)
    assert Policy(batch_size=128, lr_rule="linear").scaled_learning_rate(1e-3) == 1e-3


def write(tmp_path, data, name="p.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"format": "precsearch.policy/3"}, "format"),
        ({"default": "bfloat16"}, "default"),
        ({"types": {"Dense": "float64"}}, "types['Dense']"),
        ({"layers": {"block_(": "float32"}}, "layers['block_(']"),
        ({"loss_scale": {"initial_scale": -4}}, "loss_scale.initial_scale"),
        ({"loss_scale": {"initial_scale": "big"}}, "loss_scale.initial_scale"),
        ({"loss_scale": {"growth_steps": 0}}, "loss_scale.growth_steps"),
        ({"batch_size": -32}, "batch_size"),
        ({"batch_size": "64"}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"lr_rule": "cubic"}, "lr_rule"),
        ({"jit_compile": "yes"}, "jit_compile"),
        ({"defualt": "float32"}, "defualt"),
    ],
)
def test_bad_fields_name_file_and_field(tmp_path, change, field):
    data = full_policy().to_dict()
    if "loss_scale" in change:
        data["loss_scale"].update(change["loss_scale"])
    else:
        data.update(change)
    path = write(tmp_path, data)
    with pytest.raises(UserInputError) as info:
        load_policy(path)
    message = str(info.value)
    assert str(path) in message and repr(field) in message
    assert "\n" not in message


def test_missing_and_non_json_files(tmp_path):
    with pytest.raises(UserInputError, match="no such policy file"):
        load_policy(tmp_path / "nope.json")
    with pytest.raises(UserInputError, match="not a JSON policy file"):
        load_policy(write(tmp_path, "{not json"))
    with pytest.raises(UserInputError, match="cannot read"):
        load_policy(tmp_path)


def test_constructor_validates():
    with pytest.raises(UserInputError, match="'default'"):
        Policy(default="float16")
    with pytest.raises(UserInputError, match="initial_scale"):
        LossScale(initial_scale=math.inf)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
policy_like = st.fixed_dictionaries(
    {"format": st.sampled_from(["precsearch.policy/1", "precsearch.policy/1"]) | json_values},
    optional={
        name: json_values | st.sampled_from(["float32", "mixed_bfloat16", "linear", 32])
        for name in (
            "default",
            "types",
            "layers",
            "loss_scale",
            "batch_size",
            "lr_rule",
            "base_batch_size",
            "jit_compile",
            "manifest",
        )
    },
)


@settings(max_examples=300, deadline=None)
@given(data=json_values | policy_like)
def test_fuzz_only_user_input_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "p.json"
    path.write_text(json.dumps(data))
    try:
        policy = load_policy(path)
    except UserInputError as exc:
        assert "\n" not in str(exc)
    else:
        assert Policy.from_dict(policy.to_dict()) == policy


class RecordDtype(keras.layers.Layer):
    """A Dense-like layer that writes down the dtypes it computes in, during tracing."""

    seen: list[tuple[str, str]] = []

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units))

    def call(self, x):
        y = keras.ops.matmul(x, self.kernel)
        dtype = keras.backend.standardize_dtype
        RecordDtype.seen.append((dtype(x.dtype), dtype(y.dtype)))
        return y


def mlp(name="mlp"):
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu", name="hidden"),
            RecordDtype(16, name="probe"),
            keras.layers.Dense(3, name="logits"),
        ],
        name=name,
    )


def data(n=64):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 8)).astype("float32"), rng.integers(0, 3, size=(n,))


def dtypes_in_fit(model, steps=3):
    RecordDtype.seen.clear()
    x, y = data()
    history = model.fit(x, y, batch_size=16, epochs=1, steps_per_epoch=steps, verbose=0)
    return {dtype for dtype, _ in RecordDtype.seen}, history.history["loss"][-1]


def test_bfloat16_really_computes_in_bfloat16_inside_fit():
    model = mlp()
    Policy(default="mixed_bfloat16").compile(
        model, optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    seen, loss = dtypes_in_fit(model)
    assert seen == {"bfloat16"}
    assert math.isfinite(loss)
    assert model.get_layer("probe").kernel.dtype == "float32"
    assert model.get_layer("logits").compute_dtype == "float32"


def test_apply_to_trained_model_takes_effect_after_compile():
    model = mlp()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="adam", loss=loss)
    assert dtypes_in_fit(model)[0] == {"float32"}
    optimizer = model.optimizer
    iterations = int(optimizer.iterations.numpy())
    Policy(default="mixed_bfloat16").compile(model, optimizer=optimizer, loss=loss)
    seen, last = dtypes_in_fit(model)
    assert seen == {"bfloat16"} and math.isfinite(last)
    assert int(model.optimizer.iterations.numpy()) == iterations + 3


def test_output_layer_stays_float32_unless_named():
    model = mlp()
    assigned = Policy(default="mixed_bfloat16", types={"Dense": "mixed_bfloat16"}).assignments(
        model
    )
    assert assigned == {"hidden": "mixed_bfloat16", "probe": "mixed_bfloat16", "logits": "float32"}
    named = Policy(default="mixed_bfloat16", layers={"logits": "mixed_bfloat16"})
    assert named.assignments(model)["logits"] == "mixed_bfloat16"


def test_precedence_id_then_type_then_regex_then_default():
    inner = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, name="d1")], name="inner")
    inp = keras.Input((8,))
    x = inner(inp)
    x = keras.layers.Dense(8, name="d2")(x)
    x = keras.layers.Activation("relu", name="act")(x)
    out = keras.layers.Dense(2, name="d3")(x)
    model = keras.Model(inp, out)
    policy = Policy(
        default="mixed_float16",
        types={"Dense": "mixed_bfloat16"},
        layers={"inner/d1": "float32", "a.t": "float32", "d.*": "mixed_float16"},
    )
    assert policy.assignments(model) == {
        "inner/d1": "float32",  # exact id beats the type
        "d2": "mixed_bfloat16",  # type beats regex
        "act": "float32",  # regex beats default
        "d3": "mixed_float16",  # the output named by a regex
    }


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__(name="sub")
        self.encoder = keras.Sequential([keras.layers.Dense(16, name="enc")], name="encoder")
        self.attention = keras.layers.MultiHeadAttention(2, 4, name="mha")
        self.head = keras.layers.Dense(3, name="head")

    def call(self, x):
        h = self.encoder(x)
        h = self.attention(h, h)
        return self.head(keras.ops.mean(h, axis=1))


def transformer_functional():
    inp = keras.Input((6, 8))
    x = keras.layers.MultiHeadAttention(2, 4, name="mha")(inp, inp)
    x = keras.layers.LayerNormalization(name="ln")(x)
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    return keras.Model(inp, keras.layers.Dense(3, name="head")(x))


@pytest.mark.parametrize("kind", ["subclassed", "functional_mha"])
def test_nested_layers_are_reached_and_train(kind):
    model = Subclassed() if kind == "subclassed" else transformer_functional()
    model(np.zeros((2, 6, 8), "float32"))
    policy = Policy(default="mixed_bfloat16")
    assigned = policy.assignments(model)
    assert assigned["mha/query"] == "mixed_bfloat16"
    assert assigned["head"] == "float32"
    policy.compile(
        model, optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    assert model.get_layer("mha")._query_dense.compute_dtype == "bfloat16"
    x = np.random.default_rng(0).normal(size=(32, 6, 8)).astype("float32")
    y = np.arange(32) % 3
    history = model.fit(x, y, batch_size=8, epochs=1, steps_per_epoch=3, verbose=0)
    assert math.isfinite(history.history["loss"][-1])


def test_mobilenet_v2_types_rule():
    model = keras.applications.MobileNetV2(
        weights=None, alpha=0.35, input_shape=(32, 32, 3), classes=10
    )
    policy = Policy(default="mixed_bfloat16", types={"DepthwiseConv2D": "float32"})
    policy.apply(model)
    assert model.get_layer("Conv1").compute_dtype == "bfloat16"
    assert model.get_layer("expanded_conv_depthwise").compute_dtype == "float32"
    assert model.get_layer("predictions").compute_dtype == "float32"
    assert model.get_layer("Conv1").kernel.dtype == "float32"


def test_float16_wraps_in_loss_scale_optimizer_with_settings():
    lso = keras.optimizers.LossScaleOptimizer
    dynamic = Policy(
        layers={"hidden": "mixed_float16"},
        loss_scale=LossScale(dynamic=True, initial_scale=256, growth_steps=50),
    )
    model = mlp()
    dynamic.compile(model, optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(True))
    assert isinstance(model.optimizer, lso)
    assert float(model.optimizer.initial_scale) == 256.0
    assert model.optimizer.dynamic_growth_steps == 50
    assert model.get_layer("hidden").compute_dtype == "float16"
    x, y = data()
    history = model.fit(x, y, batch_size=16, steps_per_epoch=3, verbose=0)
    assert math.isfinite(history.history["loss"][-1])

    fixed = Policy(
        layers={"hidden": "mixed_float16"}, loss_scale=LossScale(dynamic=False, initial_scale=128)
    )
    opt = fixed.wrap_optimizer(keras.optimizers.SGD(), mlp())
    assert not isinstance(opt, lso) and opt.loss_scale_factor == 128.0

    bf16 = Policy(default="mixed_bfloat16")
    plain = keras.optimizers.Adam()
    assert bf16.wrap_optimizer(plain, mlp()) is plain
    assert bf16.wrap_optimizer(lso(plain)) is plain


def test_strict_rules():
    model = mlp()
    with pytest.raises(UserInputError, match=r"layers\['nothing_.*'\].*hidden"):
        Policy(layers={"nothing_.*": "float32"}).apply(model)
    with pytest.raises(UserInputError, match=r"types\['Conv2D'\]"):
        Policy(types={"Conv2D": "float32"}).apply(model)
    with pytest.warns(UserWarning, match="matches no layer"):
        Policy(types={"Conv2D": "float32"}).apply(model, strict=False)


def test_public_api():
    assert {"Policy", "LossScale", "load_policy", "UserInputError"} <= set(precsearch.__all__)


class PatchEncoder(keras.layers.Layer):
    """keras-io's ViT patch encoder: a Dense projection plus a position Embedding, added in
    ``call``, where no policy can put a cast between them."""

    def __init__(self, num_patches=4, projection_dim=8, **kwargs):
        super().__init__(**kwargs)
        self.num_patches = num_patches
        self.projection = keras.layers.Dense(projection_dim, name="projection")
        self.position_embedding = keras.layers.Embedding(num_patches, projection_dim, name="pos")

    def call(self, patch):
        positions = keras.ops.arange(0, self.num_patches)
        return self.projection(patch) + self.position_embedding(positions)


def vit_like():
    inputs = keras.Input((4, 6))
    x = PatchEncoder(name="encoder")(inputs)
    x = keras.layers.Flatten(name="flat")(x)
    return keras.Model(inputs, keras.layers.Dense(3, name="logits")(x), name="vit_like")


def test_a_layer_holding_layers_takes_one_dtype_for_all_of_them():
    model = vit_like()
    split = Policy(types={"Dense": "mixed_bfloat16", "Embedding": "float32"})
    assignments = split.assignments(model)
    # The Dense inside the encoder follows the encoder (float32: no rule names it), so
    # the add in its call sees one dtype; the Dense outside takes its own rule.
    assert assignments["encoder/projection"] == assignments["encoder/pos"] == "float32"
    whole = Policy(types={"PatchEncoder": "mixed_bfloat16"}).assignments(model)
    assert whole["encoder"] == whole["encoder/projection"] == whole["encoder/pos"]
    assert whole["encoder/pos"] == "mixed_bfloat16"
    # A layer named exactly still gets what it is named.
    named = Policy(
        types={"PatchEncoder": "mixed_bfloat16"}, layers={"encoder/pos": "float32"}
    ).assignments(model)
    assert named["encoder/pos"] == "float32" and named["encoder/projection"] == "mixed_bfloat16"


def test_a_split_policy_on_a_patch_encoder_trains():
    model = vit_like()
    Policy(types={"Dense": "mixed_bfloat16", "Embedding": "float32"}).compile(
        model, optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 4, 6)).astype("float32"), rng.integers(0, 3, size=(32,))
    history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert math.isfinite(history.history["loss"][-1])
