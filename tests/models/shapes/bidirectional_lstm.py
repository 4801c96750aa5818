"""A bidirectional LSTM text classifier, shaped like the Keras example users copy
("Bidirectional LSTM on IMDB"): int32 token ids, an Embedding, two stacked
Bidirectional(LSTM) layers, a sigmoid output. Tiny sizes."""

import numpy as np

precsearch_config = {"batch_size": 32}

VOCAB, MAXLEN = 500, 12


def build_model():
    import keras
    from keras import layers

    inputs = keras.Input(shape=(None,), dtype="int32")
    x = layers.Embedding(VOCAB, 16)(inputs)
    x = layers.Bidirectional(layers.LSTM(16, return_sequences=True))(x)
    x = layers.Bidirectional(layers.LSTM(16))(x)
    outputs = layers.Dense(1, activation="sigmoid")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="binary_crossentropy",
                  metrics=["accuracy"])  # fmt: skip
    return model


def _data(n, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, size=(n, MAXLEN)).astype("int32")
    labels = rng.integers(0, 2, size=n)
    ids[:, 0] = np.where(labels == 1, 5, 9)  # a learnable signal
    return ids, labels.astype("float32")


def train_data():
    return _data(256, 0)


def val_data():
    return _data(64, 1)
