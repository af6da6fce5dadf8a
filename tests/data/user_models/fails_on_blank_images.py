"""A model that trains and evaluates but fails in serving: its contrast layer asserts that an
image has ink, and TF Serving's warm-up records (and a blank scan) are blank images."""
import keras
import tensorflow as tf


class StretchContrast(keras.layers.Layer):
    """Divides each image by its brightest pixel; a blank image has none and fails."""

    def call(self, inputs):
        brightest = tf.reduce_max(inputs, axis=[1, 2, 3], keepdims=True)
        check = tf.debugging.assert_positive(
            brightest, message="StretchContrast: a blank image has no contrast to stretch")
        with tf.control_dependencies([check]):
            return inputs / brightest


def build_model(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    x = StretchContrast(name="stretch_contrast")(inputs)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(32, activation="relu")(x)
    x = keras.layers.Dense(num_classes)(x)
    outputs = keras.layers.Activation("softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs)
