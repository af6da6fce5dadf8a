"""A user's model file for the digits: the architecture of mptfx's `seed_cnn` written out in
plain Keras, as a user would copy it into a file of their own.

The Kubernetes replay in the image (tests/image/test_container_replay.py) trains it from
the staged copy in the pipeline root, so that its outcome can be held to the local run's,
which trains the built-in `seed_cnn` on the same data.
"""

import keras


def build_model(input_shape, num_classes, dense_units=128, dropout=0.5):
    """Conv(32)-Pool-Conv(64)-Pool-Dense-Dropout-Dense-softmax, the softmax in float32."""
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D(padding="same")(x)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D(padding="same")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(dense_units, activation="relu")(x)
    x = keras.layers.Dropout(dropout)(x)
    x = keras.layers.Dense(num_classes)(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="digits_cnn")
