"""A precsearch exporter writing the winning model as a TensorFlow Lite flatbuffer."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from precsearch.plugins import Exporter, Policy, UserInputError, Winner

__all__ = ["TFLite"]


class TFLite(Exporter):
    """``model.tflite``: the trained winner via TensorFlow Lite's converter.

    Args:
        arg: ``fp16`` to also quantise weights to float16.
    """

    name = "tflite"
    needs_model = True

    def __init__(self, arg: str | None = None) -> None:
        super().__init__(arg)
        if arg not in (None, "fp16"):
            raise UserInputError(f"tflite={arg!r}: expected no argument or fp16")

    def export(self, winner: Winner, directory: Path) -> list[Path]:
        import tensorflow as tf

        model = winner.model
        # TensorFlow Lite's builtin kernels have no bfloat16 (and the Python interpreter
        # no Flex delegate): the trained weights, which are float32 masters anyway,
        # are exported computing in float32, and the winner's policy is put back after.
        Policy().apply(model)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                saved = os.path.join(tmp, "saved_model")
                model.export(saved, verbose=False)
                converter = tf.lite.TFLiteConverter.from_saved_model(saved)
                if self.arg == "fp16":
                    converter.optimizations = [tf.lite.Optimize.DEFAULT]
                    converter.target_spec.supported_types = [tf.float16]
                flatbuffer = converter.convert()
        finally:
            winner.policy.apply(model, strict=False)
        path = directory / "model.tflite"
        tmp_path = directory / "model.tflite.tmp"
        tmp_path.write_bytes(flatbuffer)
        os.replace(tmp_path, path)
        return [path]
