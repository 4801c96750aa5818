"""precsearch: find the fastest mixed-precision policy that still trains like FP32.

Importing this package does not import TensorFlow; only building or training a model
does.
"""

from __future__ import annotations

from precsearch._version import __version__
from precsearch.errors import PrecsearchError, TrialFailed, UserInputError
from precsearch.policy import LossScale, Policy, load_policy

__all__ = [
    "LossScale",
    "Policy",
    "PolicyGuard",
    "PrecsearchError",
    "SearchResult",
    "TrialFailed",
    "UserInputError",
    "__version__",
    "load_policy",
    "load_study",
    "search",
]

_LAZY = {"search", "load_study", "SearchResult"}


def __getattr__(name: str):
    # The search machinery (Optuna, pandas) loads only when asked for, so that training
    # code doing `precsearch.load_policy(...)` imports nothing of it.
    if name in _LAZY:
        from precsearch.app import api

        return getattr(api, name)
    if name == "PolicyGuard":  # imports TensorFlow: only training code asks for it
        from precsearch.policy.numerics import PolicyGuard

        return PolicyGuard
    raise AttributeError(f"module 'precsearch' has no attribute {name!r}")
