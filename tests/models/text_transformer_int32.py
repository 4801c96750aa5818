"""text_transformer.py without its pitfall: the same model, data and sizes, the token ids
through an ``Input(shape=(maxlen,), dtype="int32")``. Integer ids are never cast to a low
dtype, so the embedding works in bfloat16 too and nothing is pinned: the search the
pitfall benchmark (benchmarks/experiments/pitfall.py) sets beside the one that localizes.

The model and the data are text_transformer.py's own (loaded from beside this file, one
copy): its layers, rewired after an int32 Input, and its compile settings.
"""

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "text_transformer_float_ids", Path(__file__).with_name("text_transformer.py")
)
_FLOAT_IDS = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_FLOAT_IDS)

# A literal, as the model file contract asks (read without running the file): the same
# as text_transformer.py's.
precsearch_config = {"batch_size": 32}

MAXLEN = _FLOAT_IDS.MAXLEN


def build_model():
    import keras

    float_ids = _FLOAT_IDS.build_model()  # Input, then one chain of layers
    inputs = keras.Input(shape=(MAXLEN,), dtype="int32")
    x = inputs
    for layer in float_ids.layers[1:]:
        x = layer(x)
    model = keras.Model(inputs=inputs, outputs=x)
    model.compile(**keras.saving.deserialize_keras_object(float_ids.get_compile_config()))
    return model


def _data(n, seed):
    ids, labels = _FLOAT_IDS._data(n, seed)
    return ids.astype("int32"), labels


def train_data():
    return _data(512, 0)


def val_data():
    return _data(128, 1)
