"""What training code imports: the policy file, applying it to a model, and the guard.

* :class:`Policy`, :class:`LossScale`, :func:`load_policy` (:mod:`._policy`): the policy
  file (pure data, JSON) and how it is put onto any Keras model;
* :mod:`precsearch.policy.layers`: walking a Keras model's nested layers with the ids a
  policy names them by;
* :mod:`precsearch.policy.numerics`: the numerics guard (:class:`PolicyGuard`) and the
  per-layer probe; it imports TensorFlow, so it is imported only when asked for.

Importing this package imports neither Keras nor TensorFlow.
"""

from __future__ import annotations

from precsearch.policy._policy import (
    DTYPES,
    FOLLOW,
    FORMAT,
    LR_RULES,
    LossScale,
    Policy,
    load_policy,
)

__all__ = ["DTYPES", "FOLLOW", "FORMAT", "LR_RULES", "LossScale", "Policy", "load_policy"]
