"""A model file with a syntax error on line 4 (a refusal test)."""
import keras

def build_model(input_shape, num_classes:
    return keras.Sequential()
