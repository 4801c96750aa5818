"""``precsearch train``: a real training run under a policy, guarded, checkpointed, exported.

This is also the reference example of a policy in ordinary training code: load it,
compile with it, batch at its batch size, fit with its callbacks. The model file is
read and checked as a search reads it (:class:`~precsearch.engine.problem.Problem`); the rest
is plain Keras.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from precsearch.engine.examples import DatasetExamples
from precsearch.engine.problem import Problem
from precsearch.policy import Policy, load_policy
from precsearch.policy.layers import scalar
from precsearch.policy.numerics import PolicyGuard
from precsearch.policy.serving import export_model

__all__ = ["train"]


def _fit(problem: Problem, policy: Policy, epochs: int, steps: int | None, out: Path) -> dict:
    """One run: what a user writes to train under a policy."""
    import keras

    keras.utils.set_random_seed(0)
    model = problem.build()
    kwargs = problem.compile_kwargs(user=True)
    kwargs.pop("jit_compile", None)  # the policy's XLA setting
    # A batch size other than the one the learning rate was tuned for: scale it (a
    # schedule too: its every value).
    optimizer = policy.scale_optimizer(kwargs.pop("optimizer"))
    policy.compile(model, optimizer=optimizer, **kwargs)
    learning_rate = scalar(optimizer.learning_rate)  # at step 0, for the record

    data, steps = _training_data(problem, policy.batch_size, steps)
    val = _validation_data(problem, policy.batch_size)
    probe = next(iter(data))
    guard = PolicyGuard(policy, log_dir=out / "tensorboard", probe_data=(probe[0], probe[1]))
    checkpoints = keras.callbacks.ModelCheckpoint(
        str(out / "checkpoints" / "epoch_{epoch:03d}.weights.h5"), save_weights_only=True
    )
    t0 = time.perf_counter()
    history = model.fit(
        data,
        epochs=epochs,
        steps_per_epoch=steps,
        validation_data=val,
        callbacks=[guard, checkpoints],
        verbose=2,
    )
    seconds = time.perf_counter() - t0
    final = {name: values[-1] for name, values in history.history.items()}
    run = {"final": final, "seconds": seconds, "learning_rate": learning_rate}
    if guard.stopped:
        return {**run, "stopped": guard.stopped}
    written = export_model(model, out)
    return {**run, "stopped": "", written.name: str(written)}


def _training_data(problem: Problem, batch_size: int, steps: int | None) -> tuple[Any, Any]:
    """What ``fit`` takes, and its steps per epoch: a shuffled ``tf.data`` pipeline on
    TensorFlow (repeated when ``steps`` is given); elsewhere the examples' own stream of
    batches, a pass over the examples per epoch unless ``steps`` says otherwise."""
    examples = problem.train_examples
    if isinstance(examples, DatasetExamples):
        import tensorflow as tf

        data = examples.dataset.shuffle(min(problem.n_train, 50_000), seed=0)
        if steps is not None:
            data = data.repeat()
        return data.batch(batch_size).prefetch(tf.data.AUTOTUNE), steps
    return examples.stream(batch_size, seed=0), steps or max(1, problem.n_train // batch_size)


def _validation_data(problem: Problem, batch_size: int) -> Any:
    examples = problem.val_examples
    if examples is None:
        return None
    if isinstance(examples, DatasetExamples):
        return examples.dataset.batch(batch_size)
    return tuple(examples.data)


def train(
    model_file: str,
    policy_file: str,
    epochs: int | None = None,
    steps: int | None = None,
    fp32_baseline: bool = False,
    out: str = "train",
    loader: str = "model_file",
) -> dict[str, Any]:
    """Train the model file's model under a policy file, and optionally FP32 beside it.

    Args:
        model_file: The model file (the contract of ``precsearch run``).
        policy_file: A ``best_policy.json``.
        epochs: Passes over the training data (default 1 when ``steps`` is not given).
        steps: Training steps in all, instead of whole epochs.
        fp32_baseline: Also train your FP32 setup for as long, and compare.
        out: Folder for ``policy/`` (and ``fp32/``): checkpoints of the float32 master
            weights, TensorBoard logs, ``saved_model/`` (``model.keras`` where Keras
            cannot write a SavedModel: :func:`~precsearch.policy.serving.export_model`).
        loader: How the model file is read.

    Returns:
        ``{"policy": run, "fp32": run}`` with each run's ``final`` metrics, ``seconds``,
        ``stopped`` (the guard's message, if it stopped) and ``saved_model`` (or
        ``model.keras``).

    Raises:
        UserInputError: A broken model file or policy file.
    """
    from precsearch.plugins import create

    policy = load_policy(policy_file)
    problem = Problem(create("loader", loader).load(model_file), policy.base_batch_size)
    policy = problem.normalise(policy)
    runs = {"policy": policy}
    if fp32_baseline:
        runs["fp32"] = dataclasses.replace(problem.baseline(), lr_rule="none")
    results = {}
    for label, run_policy in runs.items():
        folder = Path(out) / label
        folder.mkdir(parents=True, exist_ok=True)
        run_steps = (
            steps
            if steps is None or label == "policy"
            else _same_samples(steps, policy.batch_size, run_policy.batch_size)
        )
        results[label] = _fit(problem, run_policy, epochs or 1, run_steps, folder)
    return results


def _same_samples(steps: int, batch_size: int, other: int) -> int:
    """The steps that see as many examples at batch size ``other``."""
    return max(1, round(steps * batch_size / other))
