"""A Transformer encoder on generated token sequences: the GPU check's attention model.

Sized by ``PRECSEARCH_GPU_SCALE`` (``full``: 128 tokens, width 512, 4 blocks, batch 64;
``tiny``: what a CPU test runs in seconds). The task: is token 1 more frequent than 2.
"""

import os

import numpy as np

FULL = os.environ.get("PRECSEARCH_GPU_SCALE", "full") == "full"
LENGTH, WIDTH, BLOCKS, N = (128, 512, 4, 8192) if FULL else (16, 32, 1, 512)
VOCAB = 64

# The full size's; the script gives the tiny size its own (a literal: the contract).
precsearch_config = {"batch_size": 64, "steps": 60}


def build_model():
    import keras
    from keras import layers

    tokens = keras.Input((LENGTH,), dtype="int32", name="tokens")
    x = layers.Embedding(VOCAB, WIDTH, name="embed")(tokens)
    for i in range(BLOCKS):
        attended = layers.MultiHeadAttention(8, WIDTH // 8, name=f"mha{i}")(x, x)
        x = layers.LayerNormalization(name=f"ln{i}a")(x + attended)
        ffn = layers.Dense(4 * WIDTH, activation="gelu", name=f"ffn{i}_in")(x)
        ffn = layers.Dense(WIDTH, name=f"ffn{i}_out")(ffn)
        x = layers.LayerNormalization(name=f"ln{i}b")(x + ffn)
    x = layers.GlobalAveragePooling1D(name="pool")(x)
    outputs = layers.Dense(2, name="logits")(x)
    model = keras.Model(tokens, outputs, name="transformer")
    model.compile(
        optimizer=keras.optimizers.Adam(3e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def train_data():
    rng = np.random.default_rng(0)
    x = rng.integers(0, VOCAB, size=(N, LENGTH)).astype("int32")
    y = ((x == 1).sum(axis=1) > (x == 2).sum(axis=1)).astype("int64")
    return x, y
