"""A small Transformer encoder on a generated sequence task: which token is more frequent."""

import numpy as np

precsearch_config = {"batch_size": 64, "steps": 80, "trials": 12}

LENGTH, VOCAB, WIDTH = 32, 16, 64


def build_model():
    import keras

    tokens = keras.Input((LENGTH,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, WIDTH, name="embed")(tokens)
    attended = keras.layers.MultiHeadAttention(4, WIDTH // 4, name="mha")(x, x)
    x = keras.layers.LayerNormalization(name="ln1")(x + attended)
    ffn = keras.layers.Dense(4 * WIDTH, activation="relu", name="ffn_in")(x)
    ffn = keras.layers.Dense(WIDTH, name="ffn_out")(ffn)
    x = keras.layers.LayerNormalization(name="ln2")(x + ffn)
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    outputs = keras.layers.Dense(2, name="logits")(x)
    model = keras.Model(tokens, outputs, name="tiny_transformer")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _sequences(n, seed):
    # Label: does token 1 occur more often than token 2? A counting task over the
    # whole sequence, which attention solves and a bag of embeddings nearly does.
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VOCAB, size=(n, LENGTH))
    y = (x == 1).sum(axis=1) > (x == 2).sum(axis=1)
    return x.astype("int32"), y.astype("int64")


def train_data():
    return _sequences(4096, 0)


def val_data():
    return _sequences(512, 1)
