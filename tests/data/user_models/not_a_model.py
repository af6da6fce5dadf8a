"""A builder that returns a layer instead of a keras.Model (a refusal test)."""
import keras


def build_model(input_shape, num_classes):
    return keras.layers.Dense(num_classes)
