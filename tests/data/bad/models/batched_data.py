import keras
import numpy as np
import tensorflow as tf


def build_model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def train_data():
    x, y = np.zeros((64, 2), "f"), np.zeros((64, 1), "f")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
