"""A GAN with its own train_step, shaped like the Keras guide users copy ("Customizing what
happens in fit()": a GAN): a generator and a discriminator, one optimizer each, compiled
through the model's own compile(d_optimizer, g_optimizer, loss_fn); train_step trains the
discriminator on real and generated samples, then the generator through it."""

import numpy as np

precsearch_config = {"batch_size": 32}

LATENT = 4


def build_model():
    import keras
    import tensorflow as tf
    from keras import layers, ops

    discriminator = keras.Sequential(
        [keras.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(1)],
        name="discriminator",
    )
    generator = keras.Sequential(
        [keras.Input((LATENT,)), layers.Dense(16, activation="relu"), layers.Dense(8)],
        name="generator",
    )

    class GAN(keras.Model):
        def __init__(self, discriminator, generator, latent_dim):
            super().__init__()
            self.discriminator = discriminator
            self.generator = generator
            self.latent_dim = latent_dim
            self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
            self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
            self.seed_generator = keras.random.SeedGenerator(1337)

        @property
        def metrics(self):
            return [self.d_loss_tracker, self.g_loss_tracker]

        def compile(self, d_optimizer, g_optimizer, loss_fn):
            super().compile()
            self.d_optimizer = d_optimizer
            self.g_optimizer = g_optimizer
            self.loss_fn = loss_fn

        def call(self, inputs):
            return self.discriminator(inputs)

        def train_step(self, real):
            real, _, _ = keras.utils.unpack_x_y_sample_weight(real)
            batch_size = ops.shape(real)[0]
            noise = keras.random.normal((batch_size, self.latent_dim), seed=self.seed_generator)
            generated = self.generator(noise)
            combined = ops.concatenate([generated, real], axis=0)
            labels = ops.concatenate(
                [ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0
            )
            with tf.GradientTape() as tape:
                d_loss = self.loss_fn(labels, self.discriminator(combined))
            grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
            self.d_optimizer.apply_gradients(
                zip(grads, self.discriminator.trainable_weights, strict=True)
            )
            noise = keras.random.normal((batch_size, self.latent_dim), seed=self.seed_generator)
            misleading = ops.zeros((batch_size, 1))
            with tf.GradientTape() as tape:
                g_loss = self.loss_fn(misleading, self.discriminator(self.generator(noise)))
            grads = tape.gradient(g_loss, self.generator.trainable_weights)
            self.g_optimizer.apply_gradients(
                zip(grads, self.generator.trainable_weights, strict=True)
            )
            self.d_loss_tracker.update_state(d_loss)
            self.g_loss_tracker.update_state(g_loss)
            return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}

    gan = GAN(discriminator, generator, LATENT)
    gan.compile(
        d_optimizer=keras.optimizers.Adam(1e-3),
        g_optimizer=keras.optimizers.Adam(1e-3),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return gan


def train_data():
    rng = np.random.default_rng(0)
    x = rng.normal(loc=1.0, scale=0.5, size=(512, 8)).astype("float32")
    return x, x
