"""The TensorFlow "Image classification" tutorial's script, as the tutorial writes it:
https://www.tensorflow.org/tutorials/images/classification (the version with data
augmentation and Dropout), the reference `mptfx bench --sections photo_quality` compares
the default `mptfx run` with.

Only what a comparison needs was added around it: the folder comes as an argument, the
held-out test folder is evaluated the same way, and the result is returned instead of
plotted. The model, sizes, augmentation, optimizer, epochs and input pipeline are the
tutorial's: 180x180 px, three Conv-MaxPool blocks (16, 32, 64 filters), Dropout(0.2),
Dense(128), Adam, 15 epochs, `image_dataset_from_directory` with `validation_split=0.2`.
"""

from __future__ import annotations

import time
from typing import Any


def train_tutorial_model(data_dir: str, test_dir: str, epochs: int = 15) -> dict[str, Any]:
    """Runs the tutorial on `data_dir`; returns its validation and test accuracy and the
    wall seconds from the first read to the end of training (the test pass not counted)."""
    import tensorflow as tf
    from tensorflow import keras
    from tensorflow.keras import layers
    from tensorflow.keras.models import Sequential

    started = time.perf_counter()
    batch_size = 32
    img_height = 180
    img_width = 180
    train_ds = tf.keras.utils.image_dataset_from_directory(
        data_dir, validation_split=0.2, subset="training", seed=123,
        image_size=(img_height, img_width), batch_size=batch_size)
    val_ds = tf.keras.utils.image_dataset_from_directory(
        data_dir, validation_split=0.2, subset="validation", seed=123,
        image_size=(img_height, img_width), batch_size=batch_size)
    class_names = train_ds.class_names
    AUTOTUNE = tf.data.AUTOTUNE  # noqa: N806 (the tutorial's name)
    train_ds = train_ds.cache().shuffle(1000).prefetch(buffer_size=AUTOTUNE)
    val_ds = val_ds.cache().prefetch(buffer_size=AUTOTUNE)
    num_classes = len(class_names)
    data_augmentation = keras.Sequential([
        layers.RandomFlip("horizontal", input_shape=(img_height, img_width, 3)),
        layers.RandomRotation(0.1),
        layers.RandomZoom(0.1),
    ])
    model = Sequential([
        data_augmentation,
        layers.Rescaling(1. / 255),
        layers.Conv2D(16, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Dropout(0.2),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dense(num_classes, name="outputs"),
    ])
    model.compile(optimizer="adam",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(train_ds, validation_data=val_ds, epochs=epochs, verbose=2)
    seconds = time.perf_counter() - started
    test_ds = tf.keras.utils.image_dataset_from_directory(
        test_dir, image_size=(img_height, img_width), batch_size=batch_size, shuffle=False)
    _, test_accuracy = model.evaluate(test_ds, verbose=0)
    return {"val_accuracy": float(history.history["val_accuracy"][-1]),
            "test_accuracy": float(test_accuracy), "seconds": seconds,
            "input_size": [img_height, img_width], "epochs": epochs,
            "parameters": int(model.count_params())}
