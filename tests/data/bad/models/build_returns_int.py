import numpy as np


def build_model():
    return 42


def train_data():
    return np.zeros((8, 2), "f"), np.zeros(8, "f")
