precsearch_config = {"batchsize": 32}


def build_model():
    pass


def train_data():
    pass
