"""A model file whose builder has another name (a refusal test)."""
import keras


def make_net(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32")(
        keras.layers.Flatten()(inputs))
    return keras.Model(inputs, outputs)
