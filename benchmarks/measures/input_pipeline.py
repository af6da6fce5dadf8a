"""Input-pipeline benchmarks on the built-in digits: delivery vs consumption, and ingest.

- `prepare_data` exports the digits and ingests them with our `ingest()` once; the other
  benchmarks read those TFRecords.
- `pipeline_vs_model`: images/sec the Trainer's tf.data pipeline (`make_dataset`: read,
  parse, decode, resize, batch) delivers, against images/sec the model trains on
  synthetic data at the same size, batch and precision. ratio = delivered / consumed;
  below 1 the training is input-bound. Delivery is measured twice: decoding every epoch
  (`cache_max_mb=0`, what data larger than the cache gets) and from the in-memory cache of
  decoded images (the default when they fit). Each is measured alone, with both cores.
- `ingest_vs_import_example_gen`: our ingest (decodes and checks every image, quarantines
  bad ones, keeps the bytes) against TFX's stock ImportExampleGen executor (copies the
  serialized records into hashed splits, no decoding) on the same TFRecord files.

Example:

    data = prepare_data("/ws/bench/data", replicate=4)
    pipeline_vs_model(data, "seed_cnn", [(16, 16), (64, 64)], 32, "float32", False, spec)
"""

from __future__ import annotations

import glob
import os
import shutil
import statistics
import time
from collections.abc import Sequence
from typing import Any

import keras

from benchmarks.measures.training import CellSpec, build_compiled_model, synthetic_batch, time_steps
from components.examples_format import EVAL_SPLIT, TRAIN_SPLIT, split_pattern
from components.ingest.builtin_digits import export_digits
from components.ingest.ingest import ingest
from components.trainer import data as data_lib

# The pipeline's own Beam settings (pipelines/pipeline.py), so ImportExampleGen runs as it
# would inside `mptfx run`.
BEAM_ARGS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _ingested(data_root: str, examples_dir: str) -> dict[str, Any]:
    """Ingests `data_root` into `examples_dir` unless done before; describes the splits."""
    train_files = [split_pattern(examples_dir, TRAIN_SPLIT)]
    eval_files = [split_pattern(examples_dir, EVAL_SPLIT)]
    if not glob.glob(train_files[0]):
        shutil.rmtree(examples_dir, ignore_errors=True)
        ingest(data_root, examples_dir, os.path.join(examples_dir, "quarantine.json"))
    return {
        "examples_dir": examples_dir,
        "train_files": train_files,
        "eval_files": eval_files,
        "train_examples": data_lib.count_examples(train_files),
        "eval_examples": data_lib.count_examples(eval_files),
        "channels": data_lib.read_channels(train_files),
    }


def prepare_data(data_dir: str, replicate: int) -> dict[str, Any]:
    """Exports the digits as PNG folders and ingests them (once per data_dir).

    Returns:
        The digits' Examples ({"examples_dir", "train_files", "eval_files",
        "train_examples", "eval_examples", "channels"}), plus "tfrecord_dir": their
        records copied `replicate` times into one flat folder (the input of the ingest
        comparison), "tfrecord_records", and "replicated": the same keys for those records
        ingested, i.e. the digits `replicate` times over, whose longer epochs time more
        steadily on a shared machine.
    """
    image_root = export_digits(os.path.join(data_dir, "digits"))
    digits = _ingested(str(image_root), os.path.join(data_dir, "examples"))
    tfrecord_dir = os.path.join(data_dir, f"tfrecords-x{replicate}")
    if not os.path.isdir(tfrecord_dir):
        staging = tfrecord_dir + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        sources = data_lib.list_files(digits["train_files"] + digits["eval_files"])
        for copy in range(replicate):
            for index, source in enumerate(sources):
                shutil.copy(source, os.path.join(staging, f"part-{copy:03d}-{index}.gz"))
        os.rename(staging, tfrecord_dir)
    replicated = _ingested(tfrecord_dir, os.path.join(data_dir, f"examples-x{replicate}"))
    return {
        **digits,
        "tfrecord_dir": tfrecord_dir,
        "tfrecord_records": replicate * (digits["train_examples"] + digits["eval_examples"]),
        "replicate": replicate,
        "replicated": replicated,
    }


def delivered_images_per_sec(
    data: dict[str, Any],
    input_size: Sequence[int],
    batch_size: int,
    epochs: int,
    cache_max_mb: float,
) -> dict[str, Any]:
    """Iterates the Trainer's training dataset; median images/sec of the epochs after the
    first (which opens the files, fills the shuffle buffer and, with a cache, decodes)."""
    dataset = data_lib.make_dataset(
        data["train_files"],
        input_size,
        data["channels"],
        batch_size,
        shuffle=True,
        num_examples=data["train_examples"],
        cache_max_mb=cache_max_mb,
    )
    rates = []
    for _ in range(epochs + 1):
        started, images = time.perf_counter(), 0
        for batch_images, _ in dataset:
            images += int(batch_images.shape[0])
        rates.append(images / (time.perf_counter() - started))
    return {"images_per_sec": statistics.median(rates[1:]), "epoch_rates": rates}


def pipeline_vs_model(
    data: dict[str, Any],
    model_name: str,
    input_sizes: Sequence[Sequence[int]],
    batch_size: int,
    precision: str,
    xla: bool,
    timing: CellSpec,
    epochs: int,
) -> list[dict[str, Any]]:
    """One row per input size: delivered vs consumed images/sec and their ratio."""
    rows = []
    for input_size in input_sizes:
        delivered = delivered_images_per_sec(data, input_size, batch_size, epochs, 0)
        cached = delivered_images_per_sec(
            data, input_size, batch_size, epochs, data_lib.DEFAULT_CACHE_MAX_MB
        )
        model = build_compiled_model(
            model_name, (*input_size, data["channels"]), 10, precision, xla
        )
        batch = [synthetic_batch(model, batch_size, 10)]
        model.make_train_function()
        consumed = time_steps(
            lambda model=model, batch=batch: model.train_function(batch),
            lambda logs: float(logs["loss"]),
            batch_size,
            timing,
        )
        rows.append({
            "model": model_name,
            "input_size": list(input_size),
            "batch_size": batch_size,
            "precision": precision,
            "xla": xla,
            "delivered_images_per_sec": delivered["images_per_sec"],
            "delivered_epoch_rates": delivered["epoch_rates"],
            "delivered_cached_images_per_sec": cached["images_per_sec"],
            "delivered_cached_epoch_rates": cached["epoch_rates"],
            "consumed_images_per_sec": consumed["samples_per_sec"],
            "ratio": delivered["images_per_sec"] / consumed["samples_per_sec"],
            "cached_ratio": cached["images_per_sec"] / consumed["samples_per_sec"],
        })
        keras.backend.clear_session()
    return rows


def ingest_vs_import_example_gen(data: dict[str, Any], out_dir: str) -> dict[str, Any]:
    """Times our `ingest()` and TFX's ImportExampleGen executor on the same TFRecord files."""
    from google.protobuf import json_format
    from tfx.components.example_gen.import_example_gen import executor as import_executor
    from tfx.dsl.components.base import base_beam_executor
    from tfx.proto import example_gen_pb2
    from tfx.types import standard_artifacts, standard_component_specs

    shutil.rmtree(out_dir, ignore_errors=True)
    records, source = data["tfrecord_records"], data["tfrecord_dir"]

    ours_dir = os.path.join(out_dir, "ingest")
    started = time.perf_counter()
    result = ingest(source, ours_dir, os.path.join(out_dir, "quarantine.json"))
    ours_seconds = time.perf_counter() - started

    examples = standard_artifacts.Examples()
    examples.uri = os.path.join(out_dir, "import_example_gen")
    split_config = example_gen_pb2.SplitConfig(splits=[
        example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
        example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1),
    ])
    exec_properties = {
        standard_component_specs.INPUT_BASE_KEY: source,
        standard_component_specs.INPUT_CONFIG_KEY: json_format.MessageToJson(
            example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name="all", pattern="*")])
        ),
        standard_component_specs.OUTPUT_CONFIG_KEY: json_format.MessageToJson(
            example_gen_pb2.Output(split_config=split_config)
        ),
        standard_component_specs.OUTPUT_DATA_FORMAT_KEY: example_gen_pb2.FORMAT_TF_EXAMPLE,
    }
    context = base_beam_executor.BaseBeamExecutor.Context(
        beam_pipeline_args=BEAM_ARGS, tmp_dir=os.path.join(out_dir, "tmp") + "/"
    )
    executor = import_executor.Executor(context)  # built outside the timing (TFX setup)
    started = time.perf_counter()
    executor.Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, exec_properties)
    import_seconds = time.perf_counter() - started
    stock_records = data_lib.count_examples([split_pattern(examples.uri, "*")])
    return {
        "records": records,
        "files": len(os.listdir(source)),
        "ours_seconds": ours_seconds,
        "ours_records_per_sec": records / ours_seconds,
        "ours_written": sum(result.split_counts.values()),
        "ours_quarantined": len(result.quarantined),
        "import_example_gen_seconds": import_seconds,
        "import_example_gen_records_per_sec": records / import_seconds,
        "import_example_gen_written": stock_records,
        "ratio": import_seconds / ours_seconds,
    }
