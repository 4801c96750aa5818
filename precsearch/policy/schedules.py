"""A user's learning-rate schedule, scaled for a policy's batch size.

Keras refuses to assign a number to an optimizer built with a
``LearningRateSchedule``, so a policy that trains at another batch size rebuilds the
optimizer around :class:`ScaledSchedule`: the user's own schedule (its warm-up, decay
and steps unchanged) times the factor of the policy's LR rule. Imports Keras.
"""

from __future__ import annotations

from typing import Any

import keras

__all__ = ["ScaledSchedule", "scale_optimizer"]


@keras.saving.register_keras_serializable(package="precsearch")
class ScaledSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """``schedule(step) * factor``; saves and loads with the model like any schedule.

    Args:
        schedule: The user's schedule.
        factor: What the policy's LR rule multiplies the learning rate by.
    """

    def __init__(self, schedule: Any, factor: float) -> None:
        self.schedule = schedule
        self.factor = float(factor)

    def __call__(self, step: Any) -> Any:
        return self.schedule(step) * self.factor

    def get_config(self) -> dict[str, Any]:
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "factor": self.factor,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ScaledSchedule:
        schedule = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(schedule, config["factor"])


def scale_optimizer(optimizer: Any, factor: float) -> Any:
    """``optimizer`` with its learning rate times ``factor``, before it is built.

    A number is scaled in place; a ``LearningRateSchedule`` (which Keras does not let
    anyone assign to) is kept whole, its values scaled, in a new optimizer of the same
    class and configuration.
    """
    from precsearch.policy.layers import scalar

    if factor == 1.0:
        return optimizer
    current = getattr(optimizer, "_learning_rate", None)
    if isinstance(current, keras.optimizers.schedules.LearningRateSchedule):
        config = optimizer.get_config()
        config["learning_rate"] = ScaledSchedule(current, factor)
        return type(optimizer).from_config(config)
    optimizer.learning_rate = scalar(optimizer.learning_rate) * factor
    return optimizer
