import precsearch_no_such_package  # noqa: F401


def build_model():
    pass


def train_data():
    pass
