"""The common mistake: a custom layer mixing a float32 constant with float16 inputs."""
import keras
import numpy as np
import tensorflow as tf


class AddBias(keras.layers.Layer):
    """Adds a fixed float32 bias: fine in float32, a dtype error under a mixed policy."""

    def call(self, inputs):
        return inputs + tf.constant(np.full(inputs.shape[-1], 0.1, np.float32))


def build_model(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(16, activation="relu")(x)
    x = AddBias(name="add_bias")(x)
    x = keras.layers.Dense(num_classes)(x)
    outputs = keras.layers.Activation("softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs)
