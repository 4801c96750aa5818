def build_model():
    import keras

    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
