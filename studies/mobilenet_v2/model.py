"""MobileNetV2 (alpha 0.35, random init) on scikit-learn's digits upsampled to 96x96x3."""

import numpy as np

precsearch_config = {"batch_size": 32, "steps": 60, "trials": 16}

SIZE = 96


def build_model():
    import keras

    model = keras.applications.MobileNetV2(
        weights=None, alpha=0.35, input_shape=(SIZE, SIZE, 3), classes=10
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def _digits():
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images / 16.0  # 8x8 in [0, 1]
    # Nearest-neighbour upsampling to 96x96 (12x), grey to three channels.
    big = images.repeat(SIZE // 8, axis=1).repeat(SIZE // 8, axis=2)
    x = np.repeat(big[..., None], 3, axis=-1).astype("float32")
    return x, digits.target.astype("int64")


def train_data():
    x, y = _digits()
    return x[:1500], y[:1500]


def val_data():
    x, y = _digits()
    return x[1500:], y[1500:]
