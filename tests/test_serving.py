"""The exported SavedModel as TF Serving sees it: named inputs and outputs, and what
each output holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import sign_data, tiny_model

from precsearch.policy.serving import SIGNATURE, export_saved_model, output_kinds, serving_names
from precsearch.results.report import serving_text


def two_headed():
    import keras

    pixels = keras.Input((8,), name="pixels")
    hidden = keras.layers.Dense(16, activation="relu", name="hidden")(pixels)
    label = keras.layers.Dense(3, activation="softmax", name="label")(hidden)
    score = keras.layers.Dense(1, name="score")(hidden)
    model = keras.Model(pixels, [label, score])
    model.compile(optimizer="adam", loss=["sparse_categorical_crossentropy", "mse"])
    return model


def saved_model_cli(folder: Path) -> str:
    """``saved_model_cli show`` on the serving signature, as a TF Serving user runs it."""
    cli = Path(sys.executable).with_name("saved_model_cli")
    done = subprocess.run(
        [str(cli), "show", "--dir", str(folder), "--tag_set", "serve",
         "--signature_def", SIGNATURE],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_signature_is_named_after_the_model_s_input_and_output_layers(tmp_path):
    import tensorflow as tf

    model = two_headed()
    assert serving_names(model) == (["pixels"], ["label", "score"])
    path = export_saved_model(model, tmp_path / "saved_model")
    assert not (tmp_path / "saved_model.tmp").exists()
    shown = saved_model_cli(path)
    assert "inputs['pixels'] tensor_info" in shown
    assert "outputs['label'] tensor_info" in shown and "outputs['score'] tensor_info" in shown
    assert "keras_tensor" not in shown and "output_0" not in shown

    x = sign_data(5)[0]
    loaded = tf.saved_model.load(str(path))
    served = loaded.signatures[SIGNATURE](pixels=tf.constant(x))
    label, score = model(x)
    assert served["label"].dtype == tf.float32
    np.testing.assert_allclose(served["label"].numpy(), np.asarray(label), rtol=1e-5)
    np.testing.assert_allclose(served["score"].numpy(), np.asarray(score), rtol=1e-5)
    # Keras's own endpoint stays as model.export writes it.
    assert len(loaded.serve(tf.constant(x))) == 2


def test_a_sequential_model_is_served_by_its_layer_names_and_says_it_returns_logits(tmp_path):
    import tensorflow as tf

    model = tiny_model()  # compiled with from_logits=True, no output activation
    inputs, outputs = serving_names(model)
    assert outputs == ["logits"] and len(inputs) == 1
    assert output_kinds(model, model.loss) == {"logits": "logits"}
    path = export_saved_model(model, tmp_path / "saved_model")
    loaded = tf.saved_model.load(str(path))
    served = loaded.signatures[SIGNATURE](**{inputs[0]: tf.constant(sign_data(4)[0])})
    assert set(served) == {"logits"} and served["logits"].shape == (4, 2)
    assert loaded.serve(tf.constant(sign_data(4)[0])).shape == (4, 2)


def test_what_an_output_holds_comes_from_its_activation_and_the_loss():
    import keras

    model = two_headed()
    assert output_kinds(model, model.loss) == {
        "label": "probabilities (softmax)",
        "score": "values (no output activation)",
    }
    separate = tiny_model(keras.layers.Dense(2, name="dense"), keras.layers.Softmax(name="softmax"))
    assert output_kinds(separate) == {"softmax": "probabilities (softmax)"}
    plain = tiny_model(keras.layers.Dense(1, activation="tanh", name="out"), compiled=False)
    assert output_kinds(plain) == {"out": "values (tanh)"}
    log = tiny_model(keras.layers.Dense(2, activation="log_softmax", name="out"), compiled=False)
    assert output_kinds(log) == {"out": "log-probabilities (log_softmax)"}


def test_a_subclassed_model_keeps_the_names_keras_gives_and_still_says_what_it_returns(
    tmp_path,
):
    import keras
    import tensorflow as tf

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(4, activation="relu")
            self.out = keras.layers.Dense(2, activation="sigmoid", name="out")

        def call(self, x):
            return self.out(self.hidden(x))

    model = Net()
    model(np.zeros((1, 8), "float32"))
    assert serving_names(model) is None
    assert output_kinds(model) == {"out": "probabilities (sigmoid)"}
    loaded = tf.saved_model.load(str(export_saved_model(model, tmp_path / "sm")))
    assert loaded.serve(tf.constant(sign_data(3)[0])).shape == (3, 2)
    text = serving_text({"signature": SIGNATURE, "inputs": [], "outputs": output_kinds(model)})
    assert text.endswith("as Keras names them; the output holds probabilities (sigmoid)")


@pytest.mark.parametrize("serving", [{}, {"signature": SIGNATURE, "outputs": {}}])
def test_a_study_that_recorded_no_signature_says_nothing_of_it(serving):
    assert serving_text(serving) is None
