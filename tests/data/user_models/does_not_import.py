"""A model file that does not import: a misspelt layer name (a refusal test)."""
import keras
from keras.layers import MultiHeadAtention


def build_model(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    outputs = MultiHeadAtention(num_heads=2, key_dim=4)(inputs, inputs)
    return keras.Model(inputs, outputs)
