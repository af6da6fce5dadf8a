"""Publication formats: the serving SavedModel against its TF Lite variants, on this CPU.

The model is trained briefly on the digits (plain `fit`), exported by the Trainer's own
`export_serving_model` and converted by the TF Lite component's `convert`, so the files are
the ones the pipeline publishes. For each format: file size, single-image latency p50/p99
(after a warm-up) and throughput over the eval images.

- SavedModel: the `predict_normalized` signature, TensorFlow's default threads; its
  throughput runs batches of `batch_size` images.
- TF Lite: the interpreter with one thread (what a phone core or the parity gate sees);
  the converted model takes one image, so its throughput is images/sec one by one.

Example:

    rows = compare_formats(data, "seed_cnn", (16, 16), 2, "/tmp/pub", VARIANTS, 200, 256)
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from benchmarks.measures.training import build_compiled_model
from components.examples_format import read_label_names
from components.tflite import convert as convert_lib
from components.trainer import export as export_lib
from tools.lab.overhead import load_arrays

WARMUP_RUNS = 10


def directory_bytes(path: str) -> int:
    """Total size of the files below `path`."""
    return sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(path)
        for name in names
    )


def latency_ms(run_once: Callable[[], None], runs: int) -> dict[str, float]:
    """p50/p99 of `runs` timed calls after `WARMUP_RUNS` untimed ones, milliseconds."""
    for _ in range(WARMUP_RUNS):
        run_once()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        run_once()
        samples.append((time.perf_counter() - started) * 1000.0)
    samples.sort()
    return {
        "p50": statistics.median(samples),
        "p99": samples[min(len(samples) - 1, int(round(0.99 * (len(samples) - 1))))],
    }


def _savedmodel_row(saved_model_dir: str, images: np.ndarray, runs: int, batch: int) -> dict:
    predict = tf.saved_model.load(saved_model_dir).signatures[convert_lib.SIGNATURE_KEY]
    (input_name,) = predict.structured_input_signature[1]
    one = tf.constant(images[:1])
    latency = latency_ms(lambda: predict(**{input_name: one})["probabilities"].numpy(), runs)
    batches = [tf.constant(images[i : i + batch]) for i in range(0, len(images), batch)]
    predict(**{input_name: batches[0]})["probabilities"].numpy()  # warm-up at this shape
    started = time.perf_counter()
    classes = [
        np.argmax(predict(**{input_name: b})["probabilities"].numpy(), -1) for b in batches
    ]
    seconds = time.perf_counter() - started
    return {
        "format": "SavedModel",
        "bytes": directory_bytes(saved_model_dir),
        "weights_bytes": directory_bytes(os.path.join(saved_model_dir, "variables")),
        "latency_ms_p50": latency["p50"],
        "latency_ms_p99": latency["p99"],
        "throughput_images_per_sec": len(images) / seconds,
        "throughput_batch": batch,
        "threads": "TensorFlow default",
        "classes": np.concatenate(classes),
    }


def _tflite_row(variant: str, tflite_model: bytes, images: np.ndarray, runs: int) -> dict:
    interpreter = tf.lite.Interpreter(model_content=tflite_model, num_threads=1)
    interpreter.allocate_tensors()
    input_detail = interpreter.get_input_details()[0]
    output_detail = interpreter.get_output_details()[0]

    def quantized(image: np.ndarray) -> np.ndarray:
        if not np.issubdtype(input_detail["dtype"], np.integer):
            return image[np.newaxis].astype(input_detail["dtype"])
        scale, zero_point = input_detail["quantization"]
        info = np.iinfo(input_detail["dtype"])
        values = np.round(image[np.newaxis] / scale + zero_point)
        return np.clip(values, info.min, info.max).astype(input_detail["dtype"])

    inputs = [quantized(image) for image in images]
    interpreter.set_tensor(input_detail["index"], inputs[0])
    latency = latency_ms(interpreter.invoke, runs)
    classes = []
    started = time.perf_counter()
    for one in inputs:
        interpreter.set_tensor(input_detail["index"], one)
        interpreter.invoke()
        classes.append(int(np.argmax(interpreter.get_tensor(output_detail["index"])[0])))
    seconds = time.perf_counter() - started
    return {
        "format": f"TF Lite {variant}",
        "variant": variant,
        "bytes": len(tflite_model),
        "latency_ms_p50": latency["p50"],
        "latency_ms_p99": latency["p99"],
        "throughput_images_per_sec": len(images) / seconds,
        "throughput_batch": 1,
        "threads": 1,
        "classes": np.asarray(classes),
    }


def compare_formats(
    data: dict[str, Any],
    model_name: str,
    input_size: Sequence[int],
    epochs: int,
    work_dir: str,
    variants: Sequence[str],
    latency_runs: int,
    batch_size: int,
) -> list[dict[str, Any]]:
    """Trains, exports and converts the model; one row per format (JSON-able)."""
    channels = data["channels"]
    label_names = read_label_names(data["examples_dir"])
    x_train, y_train = load_arrays(data["train_files"], input_size, channels)
    x_eval, y_eval = load_arrays(data["eval_files"], input_size, channels)
    keras.utils.set_random_seed(42)
    model = build_compiled_model(
        model_name, (*input_size, channels), len(label_names), "float32", xla=False
    )
    model.fit(x_train, y_train, batch_size=32, epochs=epochs, verbose=0)
    saved_model_dir = os.path.join(work_dir, "Format-Serving")
    export_lib.export_serving_model(
        model, model_name, {}, input_size, channels, label_names, saved_model_dir
    )
    rows = [_savedmodel_row(saved_model_dir, x_eval, latency_runs, batch_size)]
    for variant in variants:
        representative = x_train[: convert_lib.MAX_REPRESENTATIVE_SAMPLES // 2]
        tflite_model = convert_lib.convert(saved_model_dir, variant, representative)
        with open(os.path.join(work_dir, f"{variant}.tflite"), "wb") as f:
            f.write(tflite_model)
        rows.append(_tflite_row(variant, tflite_model, x_eval, latency_runs))
    reference = rows[0]["classes"]
    fp32_bytes = next((r["bytes"] for r in rows if r.get("variant") == "fp32"), None)
    for row in rows:
        classes = row.pop("classes")
        row["accuracy"] = float(np.mean(classes == y_eval))
        row["agreement_with_savedmodel"] = float(np.mean(classes == reference))
        row["size_vs_tflite_fp32"] = row["bytes"] / fp32_bytes if fp32_bytes else None
        row["input_size"] = list(input_size)
        row["eval_images"] = int(len(x_eval))
    return rows
