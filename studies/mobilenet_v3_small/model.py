"""MobileNetV3Small (alpha 0.75, random init, logits) on scikit-learn's digits at 64x64x3."""

import numpy as np

precsearch_config = {"batch_size": 32, "trials": 16}

SIZE = 64


def build_model():
    import keras

    model = keras.applications.MobileNetV3Small(
        weights=None,
        alpha=0.75,
        input_shape=(SIZE, SIZE, 3),
        classes=10,
        classifier_activation=None,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _digits():
    from sklearn.datasets import load_digits

    digits = load_digits()
    # Nearest-neighbour upsampling to 64x64 (8x), grey to three channels, in [0, 255]
    # as the model's own Rescaling layer expects.
    big = (digits.images * (255.0 / 16.0)).repeat(SIZE // 8, axis=1).repeat(SIZE // 8, axis=2)
    x = np.repeat(big[..., None], 3, axis=-1).astype("float32")
    return x, digits.target.astype("int64")


def train_data():
    x, y = _digits()
    return x[:1500], y[:1500]


def val_data():
    x, y = _digits()
    return x[1500:], y[1500:]
