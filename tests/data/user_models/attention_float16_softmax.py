"""A transformer block on image rows with Keras' MultiHeadAttention as is: under a mixed
policy its softmax computes in float16 (or bfloat16)."""
import keras


def build_model(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    height, width, channels = input_shape
    rows = keras.layers.Reshape((height, width * channels))(inputs)
    tokens = keras.layers.Dense(16)(rows)
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, name="row_attention")(
        tokens, tokens)
    x = keras.layers.GlobalAveragePooling1D()(attended)
    logits = keras.layers.Dense(num_classes)(x)
    outputs = keras.layers.Activation("softmax", dtype="float32")(logits)
    return keras.Model(inputs, outputs)
