BATCH = 32
precsearch_config = {"batch_size": BATCH}


def build_model():
    pass


def train_data():
    pass
