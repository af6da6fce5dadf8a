"""An LSTM classifier that reads an image row by row (a recurrent model for mptfx)."""
import keras


def build_model(input_shape, num_classes, units=32):
    height, width, channels = input_shape
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    x = keras.layers.Reshape((height, width * channels))(inputs)
    x = keras.layers.LSTM(units, name="rows_lstm")(x)
    x = keras.layers.Dense(num_classes)(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="lstm_rows")
