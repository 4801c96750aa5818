import numpy as np

build_model = 3


def train_data():
    return np.zeros((8, 2), "f"), np.zeros(8, "f")
