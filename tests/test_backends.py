"""Keras on every backend: the timing waits for the device, the data streams agree, and a
whole study runs under ``KERAS_BACKEND=jax`` and ``torch`` (where they are installed).

A GPU call returns while its work is queued: a step's time must be read after the
backend's sync. The asynchronous fake below does its work on a thread that only
``sync`` waits for, so a step that forgot to sync reads almost nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time

import numpy as np
import pytest

from precsearch.backend import Backend
from precsearch.engine.examples import ArrayExamples, is_dataset, read_examples
from precsearch.engine.instrument import step
from precsearch.errors import UserInputError
from tests.helpers import MODELS, run_cli

WORK_S = 0.05


class AsyncBackend(Backend):
    """A device that works after the call returns, like a GPU's stream."""

    name = "fake"

    def __init__(self) -> None:
        self.pending: threading.Thread | None = None

    def train_call(self, model, batches):
        self.pending = threading.Thread(target=time.sleep, args=(WORK_S,))
        self.pending.start()
        return {"loss": 0.5}

    def sync(self):
        if self.pending is not None:
            self.pending.join()
            self.pending = None


class Model:
    def reset_metrics(self):
        pass


def test_a_step_is_timed_until_the_device_has_finished():
    fake = AsyncBackend()
    seconds, loss = step(Model(), iter([]), backend=fake)
    assert loss == 0.5
    assert seconds >= WORK_S  # read before the sync, it would be ~0


def test_the_fake_device_really_is_asynchronous():
    fake = AsyncBackend()
    t0 = time.perf_counter()
    fake.train_call(Model(), iter([]))
    returned = time.perf_counter() - t0
    fake.sync()
    assert returned < WORK_S / 2 <= time.perf_counter() - t0


def test_array_streams_repeat_before_cutting_and_follow_their_seed():
    x = np.arange(10, dtype="float32")[:, None]
    examples = ArrayExamples((x, np.arange(10)))
    stream = examples.stream(4, seed=3)
    seen = np.concatenate([next(stream)[1] for _ in range(5)])  # 20 = two passes
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:]) == list(range(10))
    again = examples.stream(4, seed=3)
    assert (np.concatenate([next(again)[1] for _ in range(5)]) == seen).all()
    assert not (seen[:10] == np.arange(10)).all()  # shuffled


def test_examples_come_from_arrays_dicts_and_iterables():
    x = {"a": np.zeros((6, 2), "float32"), "b": np.ones((6, 3), "float32")}
    examples = read_examples((x, np.arange(6)), "m.py: train_data()", False, _no_tensorflow)
    assert examples.n == 6 and examples.first(2)[0]["b"].shape == (2, 3)
    pairs = ((np.full(2, i, "float32"), i) for i in range(5))
    examples = read_examples(pairs, "m.py: train_data()", False, _no_tensorflow)
    assert examples.n == 5 and examples.first(5)[1].tolist() == [0, 1, 2, 3, 4]


def test_bad_examples_get_one_line():
    with pytest.raises(UserInputError, match=r"m.py: train_data\(\) returned int, expected"):
        read_examples(3, "m.py: train_data()", False, _no_tensorflow)
    with pytest.raises(UserInputError, match="do not line up"):
        read_examples((np.zeros(3), np.zeros(4)), "m.py: train_data()", False, _no_tensorflow)


def test_a_dataset_without_tensorflow_says_what_to_return_instead():
    tf = pytest.importorskip("tensorflow")
    data = tf.data.Dataset.from_tensor_slices((np.zeros((4, 2)), np.zeros(4)))
    assert is_dataset(data) and not is_dataset((np.zeros(2), np.zeros(2)))
    with pytest.raises(UserInputError, match="needs TensorFlow, not installed here: return"):
        read_examples(data, "m.py: train_data()", False, _no_tensorflow)
    examples = read_examples(data, "m.py: train_data()", False, lambda: tf)
    assert isinstance(examples, ArrayExamples) and examples.n == 4


def _no_tensorflow():
    raise UserInputError("no module named 'tensorflow': pip install ...")


# CI installs both and sets PRECSEARCH_REQUIRE_BACKENDS: there a missing one fails.
REQUIRED = bool(os.environ.get("PRECSEARCH_REQUIRE_BACKENDS"))
BACKENDS = [
    pytest.param(name, marks=pytest.mark.skipif(
        importlib.util.find_spec(name) is None and not REQUIRED, reason=f"{name} not installed"
    ))
    for name in ("jax", "torch")
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_whole_study_runs_on_the_backend(backend, tmp_path):
    env = {**os.environ, "KERAS_BACKEND": backend}
    done = run_cli(
        "run", str(MODELS / "mlp.py"), "--out", str(tmp_path), "--trials", "2", "--steps", "12",
        "--dtypes", "float32,bfloat16", "--sampler", "random", "--probe-time", "0",
        "--confirm", "1", "--confirm-time", "1", "--fp32-runs", "3", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    study = tmp_path / "mlp"
    manifest = json.loads((study / "best_policy.json").read_text())["manifest"]
    assert manifest["versions"]["keras_backend"] == backend
    assert backend in manifest["versions"]
    written = "saved_model" if (study / "saved_model").exists() else "model.keras"
    assert (study / written).exists()
    assert f"{written}:" in done.stdout
    assert f"TensorFlow's graph rewrite not available (not available on Keras's {backend}" in (
        done.stdout
    )
    # The policy file applies in training code on the same backend.
    code = (
        "import keras, precsearch, sys; sys.path.insert(0, sys.argv[2]); import mlp;"
        "m = mlp.build_model(); p = precsearch.load_policy(sys.argv[1]);"
        "p.compile(m, optimizer=keras.optimizers.Adam(1e-3), loss=m.loss);"
        "x, y = mlp.train_data(); m.fit(x, y, batch_size=p.batch_size, epochs=1, verbose=0);"
        "print(keras.backend.backend())"
    )
    import subprocess

    used = subprocess.run(
        [sys.executable, "-c", code, str(study / "best_policy.json"), str(MODELS)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert used.returncode == 0, used.stderr[-2000:]
    assert used.stdout.strip().splitlines()[-1] == backend


GRADIENTS = """
import json, sys, numpy as np
sys.path.insert(0, sys.argv[1])
import keras, mlp
from precsearch.backend import current
model = mlp.build_model()
x, y = mlp.train_data()
model(x[:2])
model.set_weights(list(np.load(sys.argv[2], allow_pickle=True)))
loss, grads = current().gradients(model, x[:64], y[:64], 1.0)
print(json.dumps([loss, *[float(np.linalg.norm(g)) for g in grads]]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_batch_gradients_agree_with_tensorflows(backend, tmp_path):
    """The probes' numerics read gradients through the backend: from the same weights and
    batch, JAX's and PyTorch's match TensorFlow's."""
    import subprocess

    weights = tmp_path / "w.npy"
    figures = {}
    for name in ("tensorflow", backend):
        if name == "tensorflow":  # the weights every backend starts from
            import keras

            from precsearch.model_file import import_model_file

            keras.utils.set_random_seed(0)
            model = import_model_file(MODELS / "mlp.py").build_model()
            model(np.zeros((2, 16), "float32"))
            np.save(weights, np.array(model.get_weights(), dtype=object), allow_pickle=True)
        done = subprocess.run(
            [sys.executable, "-c", GRADIENTS, str(MODELS), str(weights)],
            capture_output=True, text=True, env={**os.environ, "KERAS_BACKEND": name},
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        figures[name] = json.loads(done.stdout.strip().splitlines()[-1])
    assert np.allclose(figures[backend], figures["tensorflow"], rtol=1e-5)
