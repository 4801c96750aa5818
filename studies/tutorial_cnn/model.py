"""The classic mixed-precision tutorial CNN on generated, learnable 96x96 images."""

import numpy as np

precsearch_config = {"batch_size": 32, "steps": 60, "trials": 12}

SIZE, CLASSES = 96, 10


def build_model():
    import keras

    model = keras.Sequential(
        [
            keras.Input((SIZE, SIZE, 3)),
            keras.layers.Conv2D(64, 3, activation="relu", name="conv1"),
            keras.layers.MaxPooling2D(name="pool"),
            keras.layers.Conv2D(64, 3, activation="relu", name="conv2"),
            keras.layers.Flatten(name="flatten"),
            keras.layers.Dense(64, activation="relu", name="dense"),
            keras.layers.Dense(CLASSES, name="logits"),
            keras.layers.Activation("softmax", dtype="float32", name="predictions"),
        ],
        name="tutorial_cnn",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def _images(n, seed):
    # Class k is a bright 16x16 patch in cell k of a 4x3 grid, on noise: learnable.
    rng = np.random.default_rng(seed)
    y = rng.integers(0, CLASSES, size=n)
    x = rng.normal(0.0, 0.3, size=(n, SIZE, SIZE, 3)).astype("float32")
    for i, k in enumerate(y):
        row, col = divmod(int(k), 4)
        r0, c0 = 8 + row * 30, 8 + col * 22
        x[i, r0 : r0 + 16, c0 : c0 + 16, :] += 1.0
    return x, y.astype("int64")


def train_data():
    return _images(1024, 0)


def val_data():
    return _images(256, 1)
