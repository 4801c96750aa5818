"""A variational autoencoder with its own train_step whose loss is added in call() with
self.add_loss (the Keras VAE example's layers and losses, the loss given as Keras' older
VAE example gave it): a Sampling layer, an encoder and a decoder; call() adds the
reconstruction and KL losses, train_step differentiates their sum and tracks it. The model
compiles no loss: Model.compute_loss finds the added one."""

import numpy as np

precsearch_config = {"batch_size": 32}

LATENT = 2


def build_model():
    import keras
    import tensorflow as tf
    from keras import layers, ops

    class Sampling(layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.seed_generator = keras.random.SeedGenerator(1337)

        def call(self, inputs):
            z_mean, z_log_var = inputs
            epsilon = keras.random.normal(shape=ops.shape(z_mean), seed=self.seed_generator)
            return z_mean + ops.exp(0.5 * z_log_var) * ops.cast(epsilon, z_mean.dtype)

    encoder_inputs = keras.Input(shape=(16,))
    x = layers.Dense(16, activation="relu")(encoder_inputs)
    z_mean = layers.Dense(LATENT, name="z_mean")(x)
    z_log_var = layers.Dense(LATENT, name="z_log_var")(x)
    z = Sampling()([z_mean, z_log_var])
    encoder = keras.Model(encoder_inputs, [z_mean, z_log_var, z], name="encoder")
    latent_inputs = keras.Input(shape=(LATENT,))
    x = layers.Dense(16, activation="relu")(latent_inputs)
    decoder_outputs = layers.Dense(16, activation="sigmoid")(x)
    decoder = keras.Model(latent_inputs, decoder_outputs, name="decoder")

    class VAE(keras.Model):
        def __init__(self, encoder, decoder, **kwargs):
            super().__init__(**kwargs)
            self.encoder = encoder
            self.decoder = decoder
            self.total_loss_tracker = keras.metrics.Mean(name="loss")

        @property
        def metrics(self):
            return [self.total_loss_tracker]

        def call(self, data):
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            rec, z_mean, z_log_var = (
                ops.cast(t, "float32") for t in (reconstruction, z_mean, z_log_var)
            )
            self.add_loss(ops.mean(ops.sum(keras.losses.binary_crossentropy(data, rec), axis=-1)))
            kl = -0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var))
            self.add_loss(ops.mean(ops.sum(kl, axis=1)))
            return reconstruction

        def train_step(self, data):
            data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                self(data, training=True)
                total_loss = ops.sum(self.losses)
            grads = tape.gradient(total_loss, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights, strict=True))
            self.total_loss_tracker.update_state(total_loss)
            return {"loss": self.total_loss_tracker.result()}

    vae = VAE(encoder, decoder)
    vae.compile(optimizer=keras.optimizers.Adam(1e-2))
    return vae


def train_data():
    rng = np.random.default_rng(0)
    x = (rng.random(size=(512, 16)) < 0.3).astype("float32")
    return x, x
