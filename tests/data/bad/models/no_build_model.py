import numpy as np


def train_data():
    return np.zeros((8, 2), "f"), np.zeros(8, "f")
