"""The shapes users copy from public Keras examples and guides, each searched and its
answer exported (tests/models/shapes/, and the text Transformer of test_pitfalls.py):
tiny models, two trials (FP32 and the global recipe) judged against 3 FP32 runs, a short
confirmation. The shapes no
policy can be judged on (a GAN; a VAE whose loss lives only in train_step) are refused in
one line that says why."""

from __future__ import annotations

import pytest
from helpers import MODELS

import precsearch
from precsearch import UserInputError, load_policy

SHAPES = MODELS / "shapes"
SUPPORTED = {
    "bidirectional_lstm": "Embedding + stacked Bidirectional(LSTM), int32 token ids",
    "custom_train_step": "a keras.Model subclass with its own train_step",
    "multi_io": "dict inputs and outputs, dict losses, LSTMs over two texts",
    "custom_loss": "a keras.losses.Loss subclass defined inside build_model",
    "residual_blocks": "Keras-Hub-style registered residual blocks built in build()",
    "vae_add_loss": "a VAE with its own train_step, its loss added in call() (add_loss)",
}
# Refused in one line, and the words that say why.
REFUSED = {
    "vae": ("computes its loss in its own train_step", "self.add_loss"),
    "gan": ("optimizers of its own (d_optimizer, g_optimizer)", "a GAN is not supported"),
}


def test_every_shape_file_is_listed_here():
    files = {p.stem for p in SHAPES.glob("*.py")}
    assert files == set(SUPPORTED) | set(REFUSED)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_each_shape_is_searched_and_its_answer_exported(name, tmp_path):
    result = precsearch.search(
        str(SHAPES / f"{name}.py"), trials=2, steps=10, dtypes="float32,bfloat16",
        out=str(tmp_path), in_process=True, probe_time=0, confirm_top=1, confirm_time=1.0,
        exporters=["policy_json"], sampler="random", fp32_runs=3,
    )  # fmt: skip
    frame = result.trials.set_index("baseline")
    assert frame.loc["fp32", "status"] == "ok", frame.loc["fp32", "reason"]
    # The global recipe trained in bfloat16 and was judged (whatever its verdict).
    assert frame.loc["global_bfloat16", "status"] in ("ok", "infeasible", "too_slow")
    assert frame.loc["global_bfloat16", "speedup"] > 0
    exported = load_policy(tmp_path / name / "best_policy.json")
    assert exported.manifest["study"] == name and exported.manifest["verdict"]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_shape_precsearch_cannot_judge_is_refused_in_one_line(name, tmp_path):
    # Every policy is judged by Model.compute_loss: the Keras VAE example computes its loss
    # only in train_step (told to add it in call()); a GAN trains two models with optimizers
    # of its own, which no policy's one loss-scaled optimizer and one loss can stand for.
    with pytest.raises(UserInputError) as refused:
        precsearch.search(
            str(SHAPES / f"{name}.py"), trials=1, steps=10, out=str(tmp_path), in_process=True,
            probe_time=0, confirm_top=0,
        )  # fmt: skip
    message = str(refused.value)
    assert "\n" not in message
    assert all(words in message for words in REFUSED[name]), message
