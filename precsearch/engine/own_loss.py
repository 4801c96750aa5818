"""Where a model's loss comes from when it compiles none, read once on the built model.

Every policy is judged by ``Model.compute_loss``: the compiled loss plus what ``call()``
adds with ``self.add_loss`` (Keras adds them up). A model that compiles no loss is
searched when its ``call()`` adds one (the Keras VAE example, written with
``self.add_loss``); otherwise it is refused in one line that says why: a GAN (optimizers
of its own beside the compiled one, losses computed in ``train_step``) cannot be, a model
that computes its loss only in its own ``train_step`` can be if it adds it in ``call()``.
"""

from __future__ import annotations

from typing import Any

from precsearch.errors import users_fault

__all__ = ["why_no_loss"]


def why_no_loss(model: Any, x: Any, where: str, own_train_step: bool) -> str:
    """Why ``model``, which compiles no loss, has none to judge a policy by (``""`` when
    its ``call()`` adds one); ``x`` is a batch of its inputs, ``where`` names the model
    file's function in the message."""
    import keras

    optimizers = [
        name
        for name, value in vars(model).items()
        if isinstance(value, keras.optimizers.Optimizer) and name != "optimizer"
    ]
    if optimizers:
        return (
            f"{where}: the model trains with optimizers of its own ({', '.join(optimizers)}) "
            "in its own train_step, as a GAN does, but precsearch compiles each policy's model "
            "with one optimizer it can loss-scale and judges it by one loss, which adversarial "
            "losses cannot be: a GAN is not supported"
        )
    with users_fault(lambda cause: f"{where}: the model fails on its examples ({cause})"):
        model(x, training=False)
    if model.losses:
        return ""
    if own_train_step:
        return (
            f"{where}: the model computes its loss in its own train_step and compiles none, "
            "but precsearch judges every policy by Model.compute_loss: add the loss in call() "
            "with self.add_loss(...), or compile the model with the loss its train_step uses"
        )
    return f"{where} has no 'loss', expected a loss for training"
