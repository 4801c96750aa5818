"""A residual conv net on generated images: the GPU check's convolutional model.

Sized by ``PRECSEARCH_GPU_SCALE`` (``full``: 64x64 images, widths 64-256, batch 256, big
enough for Tensor Cores to matter; ``tiny``: what a CPU test runs in seconds).
"""

import os

import numpy as np

FULL = os.environ.get("PRECSEARCH_GPU_SCALE", "full") == "full"
SIZE, WIDTH, N = (64, 64, 8192) if FULL else (16, 8, 512)
CLASSES = 10

# The full size's; the script gives the tiny size its own (a literal: the contract).
precsearch_config = {"batch_size": 256, "steps": 60}


def build_model():
    import keras
    from keras import layers

    inputs = keras.Input((SIZE, SIZE, 3), name="image")
    x = layers.Conv2D(WIDTH, 3, padding="same", name="stem")(inputs)
    for stage, width in enumerate((WIDTH, 2 * WIDTH, 4 * WIDTH)):
        shortcut = layers.Conv2D(width, 1, strides=2, name=f"down{stage}")(x)
        y = layers.Conv2D(width, 3, strides=2, padding="same", name=f"conv{stage}a")(x)
        y = layers.BatchNormalization(name=f"bn{stage}a")(y)
        y = layers.Activation("relu", name=f"relu{stage}")(y)
        y = layers.Conv2D(width, 3, padding="same", name=f"conv{stage}b")(y)
        y = layers.BatchNormalization(name=f"bn{stage}b")(y)
        y = layers.Add(name=f"add{stage}")([y, shortcut])
        x = layers.Activation("relu", name=f"out{stage}")(y)
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = layers.Dense(CLASSES, name="logits")(x)
    model = keras.Model(inputs, outputs, name="convnet")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def train_data():
    rng = np.random.default_rng(0)
    y = rng.integers(0, CLASSES, size=N)
    # Each class a colour tint over noise: learnable within the budget.
    tints = np.random.default_rng(1).normal(size=(CLASSES, 1, 1, 3)).astype("float32")
    x = rng.normal(size=(N, SIZE, SIZE, 3)).astype("float32") * 0.5 + tints[y]
    return x, y
