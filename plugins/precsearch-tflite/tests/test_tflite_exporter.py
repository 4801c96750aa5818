from __future__ import annotations

import numpy as np
import pytest
from precsearch_tflite import TFLite

from precsearch.testing import ExporterContract


class TestTFLite(ExporterContract):
    plugin_class = TFLite


class TestTFLiteFp16(ExporterContract):
    plugin_class = TFLite
    arg = "fp16"


@pytest.mark.slow
def test_the_flatbuffer_runs_and_matches_keras(tmp_path):
    import tensorflow as tf

    contract = TestTFLite()
    winner = contract.make_winner(tmp_path)
    (path,) = TFLite().export(winner, tmp_path)
    interpreter = tf.lite.Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    x = np.random.default_rng(0).normal(size=(1, 4)).astype("float32")
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    expected = winner.model.predict(x, verbose=0)
    # The Keras model computes in bfloat16, the flatbuffer in float32.
    np.testing.assert_allclose(out, expected, rtol=3e-2, atol=3e-2)
    assert winner.model.layers[0].compute_dtype == "bfloat16"  # the policy is back
