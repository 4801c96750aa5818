import keras
import numpy as np


def build_model():
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


def train_data():
    return np.zeros((64, 2), "f"), np.zeros((64, 1), "f")
