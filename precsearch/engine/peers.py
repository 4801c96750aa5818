"""TensorFlow's own automatic mixed precision, measured beside the found policy as a peer.

TensorFlow can rewrite a float32 graph to low precision by itself (a Grappler pass):
``auto_mixed_precision_onednn_bfloat16`` on CPUs (oneDNN), ``auto_mixed_precision``
(float16, which needs loss scaling) on GPUs. It is a session-wide optimizer option that
applies to the non-XLA ``tf.function`` graphs *called* while it is on, so the peer's
calls run inside :meth:`GraphRewrite.context` and every other model's outside it.

Whether the rewrite does anything on this machine is measured, not assumed: its first
training step from the shared initial weights must differ from FP32's; if it is
bit-for-bit the same, TensorFlow did not rewrite the graph here.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from precsearch.policy import Policy

if TYPE_CHECKING:
    from precsearch.engine.problem import Problem

__all__ = ["GraphRewrite"]


class GraphRewrite:
    """The graph-rewrite peer for one problem (see the module doc)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.float16 = bool(problem.info.gpus)
        self.option = (
            "auto_mixed_precision" if self.float16 else "auto_mixed_precision_onednn_bfloat16"
        )

    def policy(self) -> Policy:
        """The user's training in FP32 without XLA: the rewrite skips XLA functions."""
        return dataclasses.replace(self.problem.baseline(), jit_compile=False)

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """The rewrite is on inside, as it was outside after."""
        tf = self.problem.backend.module  # the rewrite exists on TensorFlow only
        before = tf.config.optimizer.get_experimental_options()
        tf.config.optimizer.set_experimental_options({self.option: True})
        try:
            yield
        finally:
            was = before.get(self.option, False)
            tf.config.optimizer.set_experimental_options({self.option: was})

    def build(self, policy: Policy, seed: int = 0) -> Any:
        """A model for the peer; on a GPU its optimizer gets the loss scaling that a
        float16 rewrite needs (Keras adds it only for a global float16 policy)."""
        model = self.problem.model_for(policy, seed=seed)
        if not self.float16:
            return model
        keras = self.problem.keras
        kwargs = self.problem.compile_kwargs()
        kwargs.pop("optimizer")
        model.compile(
            optimizer=keras.optimizers.LossScaleOptimizer(model.optimizer),
            jit_compile=False,
            **kwargs,
        )
        model.optimizer.build(model.trainable_variables)
        model.make_train_function()
        return model
