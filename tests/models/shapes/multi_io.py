"""Multiple inputs and outputs with dict data and dict losses, shaped like the Keras guide
users copy ("The Functional API": ticket title, body and tags to a priority and a
department), the text read by LSTMs. Tiny sizes."""

import numpy as np

precsearch_config = {"batch_size": 32}

VOCAB, TAGS, DEPARTMENTS = 300, 6, 3


def build_model():
    import keras
    from keras import layers

    title = keras.Input(shape=(None,), dtype="int32", name="title")
    body = keras.Input(shape=(None,), dtype="int32", name="body")
    tags = keras.Input(shape=(TAGS,), name="tags")
    title_features = layers.LSTM(16)(layers.Embedding(VOCAB, 16)(title))
    body_features = layers.LSTM(8)(layers.Embedding(VOCAB, 16)(body))
    x = layers.concatenate([title_features, body_features, tags])
    priority = layers.Dense(1, name="priority")(x)
    department = layers.Dense(DEPARTMENTS, name="department")(x)
    model = keras.Model(
        inputs={"title": title, "body": body, "tags": tags},
        outputs={"priority": priority, "department": department},
    )
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss={
            "priority": keras.losses.BinaryCrossentropy(from_logits=True),
            "department": keras.losses.CategoricalCrossentropy(from_logits=True),
        },
        loss_weights={"priority": 1.0, "department": 0.2},
    )
    return model


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = {
        "title": rng.integers(1, VOCAB, size=(n, 6)).astype("int32"),
        "body": rng.integers(1, VOCAB, size=(n, 10)).astype("int32"),
        "tags": rng.integers(0, 2, size=(n, TAGS)).astype("float32"),
    }
    department = np.eye(DEPARTMENTS, dtype="float32")[x["tags"][:, :DEPARTMENTS].argmax(1)]
    y = {"priority": x["tags"][:, :1].copy(), "department": department}
    return x, y


def train_data():
    return _data(256, 0)


def val_data():
    return _data(64, 1)
