"""The Trainer module file of the stock TFX pipeline (tools/lab/stock_tfx.py), written the
way TFX's templates write one (tfx/examples/penguin/penguin_utils_keras.py): constants,
`_input_fn`, `_make_keras_model`, a serving signature that parses tf.Examples, `run_fn`.

It trains the model `mptfx run` trains by default (the registry's seed CNN at 16x16) for the
same epochs and batch, in float32 with no precision, XLA or strategy logic.
"""

from __future__ import annotations

import tensorflow as tf

from models import build_model

_IMAGE_KEY = "image"
_LABEL_KEY = "label"
_NUM_CLASSES = 10
_FEATURES = {
    _IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
    _LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
}


def _decode(images: tf.Tensor, input_size: tuple[int, int]) -> tf.Tensor:
    def one(png: tf.Tensor) -> tf.Tensor:
        image = tf.io.decode_png(png, channels=1)
        return tf.image.resize(tf.cast(image, tf.float32) / 255.0, input_size)

    return tf.map_fn(one, images, fn_output_signature=tf.TensorSpec([*input_size, 1]))


def _input_fn(file_pattern: list[str], batch_size: int, input_size: tuple[int, int],
              shuffle: bool) -> tf.data.Dataset:
    files = tf.io.gfile.glob(file_pattern)
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP")
    if shuffle:
        dataset = dataset.shuffle(2048, seed=42)
    dataset = dataset.batch(batch_size).map(lambda s: tf.io.parse_example(s, _FEATURES))
    return dataset.map(lambda f: (_decode(f[_IMAGE_KEY], input_size), f[_LABEL_KEY])).prefetch(
        tf.data.AUTOTUNE)


def _make_keras_model(input_size: tuple[int, int]):
    import keras

    model = build_model("seed_cnn", (*input_size, 1), _NUM_CLASSES)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(),
                  metrics=["accuracy"])
    return model


def _serving_signature(model, input_size: tuple[int, int]):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve_tf_examples_fn(serialized):
        features = tf.io.parse_example(serialized, {_IMAGE_KEY: _FEATURES[_IMAGE_KEY]})
        return {"outputs": model(_decode(features[_IMAGE_KEY], input_size), training=False)}

    return serve_tf_examples_fn


def run_fn(fn_args) -> None:
    """Trains and exports; reads `fn_args.train_files`, `eval_files`, `serving_model_dir`
    and `custom_config` {"epochs", "batch_size", "input_size"}."""
    config = fn_args.custom_config
    input_size = tuple(int(v) for v in config["input_size"])
    model = _make_keras_model(input_size)
    model.fit(
        _input_fn(fn_args.train_files, int(config["batch_size"]), input_size, shuffle=True),
        validation_data=_input_fn(fn_args.eval_files, int(config["batch_size"]), input_size,
                                  shuffle=False),
        epochs=int(config["epochs"]),
        verbose=2,
    )
    signatures = {"serving_default": _serving_signature(model, input_size)}
    tf.saved_model.save(model, fn_args.serving_model_dir, signatures=signatures)
