"""A model whose softmax output follows the global policy (float16 under mixed_float16)."""
import keras


def build_model(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.Flatten()(inputs)
    outputs = keras.layers.Dense(num_classes, activation="softmax", name="head")(x)
    return keras.Model(inputs, outputs)
