"""Text classification with a Transformer, shaped like the Keras example users copy.

Layer subclasses for the token-and-position embedding and the Transformer block, token
ids fed through a plain float ``Input(shape=(maxlen,))``, a softmax output. The ids run up
to 1999 (every sequence ends with the last id, its end marker): bfloat16 rounds 1999 to
2000, out of the embedding's range, so the embedding breaks in low precision and nothing
else does. Tiny sizes: the search's tests run it.
"""

import numpy as np

precsearch_config = {"batch_size": 32}

VOCAB, MAXLEN, EMBED, HEADS, FF = 2000, 12, 16, 2, 16


def build_model():
    import keras
    from keras import layers

    class TransformerBlock(layers.Layer):
        def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1, **kwargs):
            super().__init__(**kwargs)
            self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
            self.ffn = keras.Sequential(
                [layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)]
            )
            self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
            self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
            self.dropout1 = layers.Dropout(rate)
            self.dropout2 = layers.Dropout(rate)

        def call(self, inputs, training=False):
            attn_output = self.att(inputs, inputs)
            attn_output = self.dropout1(attn_output, training=training)
            out1 = self.layernorm1(inputs + attn_output)
            ffn_output = self.ffn(out1)
            ffn_output = self.dropout2(ffn_output, training=training)
            return self.layernorm2(out1 + ffn_output)

    class TokenAndPositionEmbedding(layers.Layer):
        def __init__(self, maxlen, vocab_size, embed_dim, **kwargs):
            super().__init__(**kwargs)
            self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
            self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

        def call(self, x):
            maxlen = keras.ops.shape(x)[-1]
            positions = keras.ops.arange(start=0, stop=maxlen, step=1)
            return self.token_emb(x) + self.pos_emb(positions)

    inputs = layers.Input(shape=(MAXLEN,))
    x = TokenAndPositionEmbedding(MAXLEN, VOCAB, EMBED)(inputs)
    x = TransformerBlock(EMBED, HEADS, FF)(x)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dropout(0.1)(x)
    x = layers.Dense(16, activation="relu")(x)
    x = layers.Dropout(0.1)(x)
    outputs = layers.Dense(2, activation="softmax")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def _data(n, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB - 1, size=(n, MAXLEN))
    labels = rng.integers(0, 2, size=n)
    ids[:, 0] = np.where(labels == 1, 7, 3)  # a learnable signal in the first token
    ids[:, -1] = VOCAB - 1  # the end marker: the largest id
    return ids.astype("float32"), labels


def train_data():
    return _data(512, 0)


def val_data():
    return _data(128, 1)
