"""`mptfx predict` beside a plain `model.predict` over a tf.data pipeline, on the same photos.

- the model: the seed CNN at `input_size` on 3 channels, fitted for `epochs` on the photos'
  class folders (so its answers are a trained model's, not near-ties of random weights),
  exported by the Trainer's exporter and published as version 1 of a TF Serving layout
  with its models.config, as a run's Pusher leaves it;
- ours: what the command runs (`plan_sources` over the folder, `choose_version` and
  `open_predictor` on the layout, `predict_rows`, a CSV `RowWriter` to a file), timed from
  the listing to the last row written, the SavedModel already loaded;
- plain: the Keras model in memory, `model.predict` over `list files -> read_file ->
  decode_jpeg -> resize -> /255 -> batch -> prefetch` (AUTOTUNE), as the TensorFlow guides
  write it, timed from building the dataset to the array of probabilities;
- agreement: each file's class from ours against `serving_default` of the published
  SavedModel fed the file's bytes in a tf.Example, the request TF Serving answers.

The two alternate `rounds` times; each side's median round is reported.

    result = predict_vs_plain("/ws/bench/predict/photos", "/ws/bench/predict", [64, 64], 64, 3)
"""

from __future__ import annotations

import csv
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

MODEL_NAME = "photos"


def _publish(photo_dir: str, out_dir: str, input_size: Sequence[int], batch_size: int,
             epochs: int) -> tuple[Any, str, list[str]]:
    """The fitted Keras model, the serving folder it is published in, and the photos."""
    import keras

    from benchmarks.measures.data_scale import labelled_photos
    from components.serving.models_config import ServingLabels, write_labels
    from components.trainer.export import export_serving_model
    from models import build_model

    files, labels = labelled_photos(photo_dir)
    names = sorted({os.path.basename(os.path.dirname(f)) for f in files})
    keras.utils.set_random_seed(0)
    model = build_model("seed_cnn", (*input_size, 3), len(names))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(_plain_dataset(files, input_size, batch_size, labels), epochs=epochs, verbose=0)
    serving_dir = os.path.join(out_dir, "serving")
    export_serving_model(model, "seed_cnn", {}, list(input_size), 3, names,
                         os.path.join(serving_dir, MODEL_NAME, "1"))
    write_labels(os.path.join(serving_dir, "models.config"), MODEL_NAME,
                 os.path.join(serving_dir, MODEL_NAME), ServingLabels(stable=1))
    return model, serving_dir, files


def _plain_dataset(files: list[str], input_size: Sequence[int], batch_size: int,
                   labels: Any = None) -> Any:
    import tensorflow as tf

    size = [int(input_size[0]), int(input_size[1])]

    def load(path: tf.Tensor) -> tf.Tensor:
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return tf.image.resize(image, size) / 255.0

    images = tf.data.Dataset.from_tensor_slices(files).map(
        load, num_parallel_calls=tf.data.AUTOTUNE)
    if labels is not None:
        images = tf.data.Dataset.zip((images, tf.data.Dataset.from_tensor_slices(labels)))
    return images.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def _ours(photo_dir: str, predictor: Any, batch_size: int, csv_path: str) -> tuple[float, int]:
    """Seconds and rows of the command's own path, CSV written to `csv_path`."""
    from components.predict.run import RowWriter, predict_rows
    from components.predict.sources import plan_sources

    started = time.perf_counter()
    rows = 0
    with open(csv_path, "w", encoding="utf-8", newline="") as out:
        writer = RowWriter(out, "csv", 1)
        for row in predict_rows(plan_sources([photo_dir]), predictor, batch_size, 1):
            writer.write(row)
            rows += 1
    return time.perf_counter() - started, rows


def _plain(model: Any, files: list[str], input_size: Sequence[int], batch_size: int
           ) -> tuple[float, int]:
    started = time.perf_counter()
    probabilities = model.predict(_plain_dataset(files, input_size, batch_size), verbose=0)
    return time.perf_counter() - started, len(probabilities)


def _serving_default_classes(serving_dir: str, files: list[str], batch_size: int
                             ) -> dict[str, str]:
    """file -> class name `serving_default` answers for an Example holding the file."""
    import tensorflow as tf

    served = tf.saved_model.load(os.path.join(serving_dir, MODEL_NAME, "1"))
    classes: dict[str, str] = {}
    for start in range(0, len(files), batch_size):
        batch = files[start:start + batch_size]
        examples = [tf.train.Example(features=tf.train.Features(feature={
            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[
                open(path, "rb").read()]))})).SerializeToString() for path in batch]
        names = served.signatures["serving_default"](examples=tf.constant(examples))
        for path, name in zip(batch, names["class_name"].numpy(), strict=True):
            classes[path] = name.decode()
    return classes


def predict_vs_plain(photo_dir: str, out_dir: str, input_size: Sequence[int],
                     batch_size: int, rounds: int, epochs: int = 1) -> dict[str, Any]:
    """Images/s of `mptfx predict`'s path and of plain `model.predict` on the photos of
    `photo_dir` (alternating `rounds` times; medians), and how many of ours agree with
    `serving_default`."""
    from components.ingest.reader import parallel_calls
    from components.predict.run import predict_rows
    from components.predict.served import choose_version, open_predictor
    from components.predict.sources import FileSource

    model, serving_dir, files = _publish(photo_dir, out_dir, input_size, batch_size, epochs)
    predictor = open_predictor(choose_version(serving_dir))
    # A batch of each first: both trace their tf.data functions and model call once,
    # outside the timed rounds.
    _plain(model, files[:batch_size], input_size, batch_size)
    list(predict_rows([FileSource(files[:batch_size])], predictor, batch_size))
    csv_path = os.path.join(out_dir, "predictions.csv")
    seconds: dict[str, list[float]] = {"ours": [], "plain": []}
    for _ in range(rounds):
        took, plain_rows = _plain(model, files, input_size, batch_size)
        seconds["plain"].append(took)
        took, rows = _ours(photo_dir, predictor, batch_size, csv_path)
        seconds["ours"].append(took)
    with open(csv_path, encoding="utf-8") as handle:
        ours = {row["file"]: row for row in csv.DictReader(handle)}
    reference = _serving_default_classes(serving_dir, files, batch_size)
    disagreements = sorted(f for f in files if ours.get(f, {}).get("class") != reference[f])
    rates = {name: [len(files) / s for s in values] for name, values in seconds.items()}
    ours_rate, plain_rate = (statistics.median(rates[n]) for n in ("ours", "plain"))
    return {
        "photos": len(files), "rows": rows, "plain_rows": plain_rows,
        "errors": sum(1 for row in ours.values() if row["error"]),
        "model": "seed_cnn", "input_size": list(input_size), "batch_size": batch_size,
        "cores": parallel_calls(),
        "rounds": {name: [round(rate, 1) for rate in values] for name, values in rates.items()},
        "ours_images_per_sec": ours_rate, "plain_images_per_sec": plain_rate,
        "ratio": ours_rate / plain_rate, "agreement": 1 - len(disagreements) / len(files),
        "disagreements": disagreements[:10],
    }
