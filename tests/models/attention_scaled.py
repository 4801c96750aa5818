"""A small self-attention classifier whose float16 gradient overflows at dynamic loss
scaling's initial scale (2**15) and is finite a few halvings lower, as the optimizer,
skipping those steps, reaches it: nothing about float16 breaks it."""

import numpy as np

precsearch_config = {"batch_size": 32}

LENGTH, WIDTH, VOCAB = 16, 32, 64


def build_model():
    import keras
    from keras import layers

    tokens = keras.Input((LENGTH,), dtype="int32", name="tokens")
    x = layers.Embedding(VOCAB, WIDTH, name="embed")(tokens)
    attended = layers.MultiHeadAttention(8, WIDTH // 8, name="mha")(x, x)
    x = layers.LayerNormalization(name="ln")(x + attended)
    x = layers.GlobalAveragePooling1D(name="pool")(x)
    model = keras.Model(tokens, layers.Dense(2, name="logits")(x))
    model.compile(
        optimizer=keras.optimizers.Adam(3e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def train_data():
    rng = np.random.default_rng(0)
    x = rng.integers(0, VOCAB, size=(256, LENGTH)).astype("int32")
    return x, ((x == 1).sum(axis=1) > (x == 2).sum(axis=1)).astype("int64")
