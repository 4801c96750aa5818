from __future__ import annotations

import textwrap

import pytest

from precsearch import Policy, UserInputError
from precsearch.engine.runner import Runner
from precsearch.model_file import load_model_file, read_config, spec_from_callables
from precsearch.records import Budget

GOOD_BUILD = """
import keras, numpy as np
def build_model():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    m.compile(optimizer="sgd", loss="mse")
    return m
"""
GOOD_DATA = """
def train_data():
    return np.zeros((64, 4), "float32"), np.zeros((64, 2), "float32")
"""


def model_file(tmp_path, text):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_config_is_read_without_importing(tmp_path):
    path = model_file(
        tmp_path, 'raise SystemExit("imported!")\nprecsearch_config = {"batch_size": 64}\n'
    )
    assert read_config(path) == {"batch_size": 64}


# (file text, function named in the message, words of the expectation)
IMPORT_TIME = [
    ("def build_model(:\n", "syntax error", "syntax error"),
    ("import not_a_module_xyz\n", "the model file needs", "not installed here"),
    (GOOD_DATA, "build_model()", "must define it"),
    ("build_model = 3\n" + GOOD_DATA, "build_model", "expected a function"),
    (GOOD_BUILD, "train_data()", "must define it"),
    ("precsearch_config = dict(batch_size=3)\n", "precsearch_config", "literal"),
    ("precsearch_config = {'batch': 3}\n", "precsearch_config", "unknown"),
    ("precsearch_config = {'batch_size': '3'}\n", "precsearch_config", "expected int"),
]


@pytest.mark.parametrize(("text", "where", "expected"), IMPORT_TIME)
def test_malformed_model_files_at_import(tmp_path, text, where, expected):
    path = model_file(tmp_path, text)
    with pytest.raises(UserInputError) as info:
        load_model_file(path)
    message = str(info.value)
    assert str(path) in message and where in message and expected in message
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(UserInputError, match="no such model file"):
        load_model_file(tmp_path / "nope.py")


BUILD_TIME = [
    (
        "import numpy as np\ndef build_model():\n    return 'a model'\n" + GOOD_DATA,
        "build_model()",
        "expected a keras.Model",
    ),
    (
        GOOD_BUILD.replace('    m.compile(optimizer="sgd", loss="mse")\n', "") + GOOD_DATA,
        "no loss",
        "compile_kwargs()",
    ),
    (GOOD_BUILD + "def train_data():\n    return [1, 2, 3, 4]\n", "train_data()", "(x, y)"),
    (
        GOOD_BUILD
        + "def train_data():\n    return np.zeros((64, 5), 'f'), np.zeros((64, 2), 'f')\n",
        "train_data()",
        "do not fit",
    ),
    (
        GOOD_BUILD
        + "def train_data():\n    return np.zeros((64, 4), 'f'), np.zeros((63, 2), 'f')\n",
        "train_data()",
        "do not line up",
    ),
    (
        GOOD_BUILD
        + "import tensorflow as tf\ndef train_data():\n"
        + "    x = np.zeros((64, 4), 'f'); y = np.zeros((64, 2), 'f')\n"
        + "    return tf.data.Dataset.from_tensor_slices((x, y)).batch(8)\n",
        "train_data()",
        "batched dataset",
    ),
    (
        GOOD_BUILD
        + "import tensorflow as tf\ndef train_data():\n"
        + "    x = np.zeros((64, 4), 'f'); y = np.zeros((64, 2), 'f')\n"
        + "    return tf.data.Dataset.from_tensor_slices((x, y)).repeat()\n",
        "train_data()",
        "repeats forever",
    ),
    (GOOD_BUILD + "def train_data():\n    raise RuntimeError('disk')\n", "train_data()", "disk"),
]


@pytest.mark.parametrize(("text", "where", "expected"), BUILD_TIME)
def test_malformed_model_files_at_build(tmp_path, text, where, expected):
    path = model_file(tmp_path, text)
    with pytest.raises(UserInputError) as info:
        Runner(load_model_file(path), budget=Budget(steps=10, block=2))
    message = str(info.value)
    assert str(path) in message and where in message and expected in message
    assert "\n" not in message


def test_callables_spec_runs(tmp_path):
    import keras
    import numpy as np

    def build():
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = x[:, :2] * 3.0  # learnable: the loss falls well beyond the seeds' noise
    spec = spec_from_callables(
        build, (x, y), compile_kwargs=lambda: {"optimizer": "sgd", "loss": "mse"}
    )
    runner = Runner(spec, budget=Budget(steps=10, block=2, warmup=1))
    result = runner.try_policy(Policy())
    assert result.status == "ok", result.reason
    # FP32 from the same weights and data order (seed 0) as an FP32 run of that seed.
    twin = runner.reference(seeds=(0,)).curves[0]
    assert result.curve["loss"][: len(twin)] == twin


def _builder(width):
    import keras

    def build():
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(width)])

    return build


def test_an_edited_build_function_gets_another_fingerprint():
    import numpy as np

    from precsearch.model_file import callable_fingerprint

    data = (np.zeros((8, 4), "float32"), np.zeros(8))

    def build():  # the same name and place as the edited one below
        return 1

    first = spec_from_callables(build, data).fingerprint

    def build():  # noqa: F811 - edited in a notebook cell
        return 2

    assert first and spec_from_callables(build, data).fingerprint != first
    # Closure values and data count; the same code and values give the same hash.
    assert callable_fingerprint(_builder(8)) == callable_fingerprint(_builder(8))
    assert callable_fingerprint(_builder(8)) != callable_fingerprint(_builder(16))
    other = (np.ones((8, 4), "float32"), np.zeros(8))
    assert (
        spec_from_callables(build, other).fingerprint
        != spec_from_callables(build, data).fingerprint
    )


def test_what_cannot_be_fingerprinted_is_not_cached_on_disk(tmp_path):
    import keras
    import numpy as np
    import tensorflow as tf

    from precsearch.engine.references import References

    x, y = np.zeros((64, 4), "float32"), np.zeros((64, 2), "float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y))

    def build():
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

    spec = spec_from_callables(build, lambda: dataset, compile_kwargs={"loss": "mse"})
    assert spec.fingerprint == ""
    runner = Runner(spec, work_dir=tmp_path, budget=Budget(steps=10, block=2, warmup=1))
    assert (
        isinstance(runner.references, References)
        and runner.references.path(Policy(), 10, (1, 2, 3)) is None
    )
    runner.reference()
    assert not list(tmp_path.glob("reference_*.json"))


def test_out_of_memory_while_checking_the_data_is_not_bad_input(tmp_path):
    # The model builds, but the machine has no room to run a batch through it.
    path = model_file(
        tmp_path,
        GOOD_BUILD.replace(
            "m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])",
            "m = keras.Sequential([keras.Input((4,)), NoRoom(), keras.layers.Dense(2)])",
        )
        + GOOD_DATA
        + "\nimport keras\n\nclass NoRoom(keras.layers.Layer):\n"
        + "    def call(self, x):\n        raise MemoryError('no room for this batch')\n",
    )
    with pytest.raises(MemoryError):
        Runner(load_model_file(path), budget=Budget(steps=10, block=2))
