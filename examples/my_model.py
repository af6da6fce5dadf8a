"""An example of your own model for mptfx: a small CNN with a custom layer done right.

Use it with:

    mptfx run --set model.module_file=examples/my_model.py --set model.params.units=64

mptfx calls `build_model(input_shape, num_classes, **params)` under the run's dtype policy
(float32, mixed_float16 or mixed_bfloat16) and gives it `model.params` as keyword arguments.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="my_model")
class LearnedScale(keras.layers.Layer):
    """Multiplies each channel by a learned factor (initialised to `initial`).

    Mixed precision done right: the weight is created by `add_weight`, so it is float32 (the
    policy's variable dtype); Keras casts the inputs to `self.compute_dtype` (float16 or
    bfloat16 under a mixed policy), and the weight is cast to that dtype before use.
    """

    def __init__(self, initial=1.0, **kwargs):
        super().__init__(**kwargs)
        self.initial = float(initial)

    def build(self, input_shape):
        self.scale = self.add_weight(
            shape=(input_shape[-1],),
            initializer=keras.initializers.Constant(self.initial),
            name="scale",
        )

    def call(self, inputs):
        return inputs * ops.cast(self.scale, self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "initial": self.initial}


def build_model(input_shape, num_classes, units=32, dropout=0.0):
    """Conv -> LearnedScale -> pool -> Dense(units) -> softmax in float32."""
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = LearnedScale(name="learned_scale")(x)
    x = keras.layers.MaxPooling2D(padding="same")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(units, activation="relu")(x)
    if dropout:
        x = keras.layers.Dropout(dropout)(x)
    x = keras.layers.Dense(num_classes)(x)
    # The output (and so the loss) in float32 whatever the policy.
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="my_model")
