import keras
import numpy as np

precsearch_config = {"dtypes": ["float32"]}


def build_model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def train_data():
    return np.zeros((64, 2), "f"), np.zeros((64, 1), "f")
