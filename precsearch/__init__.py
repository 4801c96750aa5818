"""precsearch: find the fastest mixed-precision policy that still trains like FP32.

Importing this package does not import TensorFlow; only building or training a model
does.
"""

from __future__ import annotations

from precsearch.errors import PrecsearchError, TrialFailed, UserInputError
from precsearch.policy import LossScale, Policy, load_policy

__version__ = "0.1.0"

__all__ = [
    "LossScale",
    "Policy",
    "PrecsearchError",
    "TrialFailed",
    "UserInputError",
    "__version__",
    "load_policy",
]
