"""Tests for the Trainer module: XLA/strategy resolution, data, run_fn, export, warm start,
segmentation. (Precision, lint and loss scaling: test_precision.py; distribution,
accumulation and resuming: test_trainer_distribution.py.)

Everything runs for real on tiny scikit-learn digits Examples (8x8 grayscale PNGs) and
small synthetic volumes.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from tfx.components.trainer.fn_args_utils import FnArgs

import models
from components import pod_env
from components.examples_format import (
    COMPRESSION,
    EVAL_SPLIT,
    IMAGE_KEY,
    LABEL_KEY,
    TRAIN_SPLIT,
    LabelNamesMissing,
    examples_uri_of,
    read_label_names,
    split_dir,
)
from components.trainer import data as data_lib
from components.trainer import export as export_lib
from components.trainer import module, strategy
from components.trainer.callbacks import EpochTensorBoard, ThroughputCallback
from components.trainer.lint import MixedPrecisionLintError
from components.trainer.precision import (
    DeviceDescription,
    describe_devices,
    resolve_precision_policy,
    resolve_xla,
)
from models.registry import unregister_model
from tests.trainer_testdata import (
    EVAL_FRACTION,
    fit_fields,
    fn_args_dict,
    write_digits_examples,
)

NUM_IMAGES = 300
LABEL_NAMES = [str(d) for d in range(10)]
SUMMARY_KEYS = {
    "precision",
    "precision_reason",
    "strategy",
    "replicas",
    "xla",
    "epochs",
    "batch_size",
    "global_batch_size",
    "learning_rate",
    "images_per_sec",
    "input_size",
    "channels",
    "label_names",
    "history",
}

CPU = DeviceDescription("CPU", "/physical_device:CPU:0")
TPU = DeviceDescription("TPU", "/physical_device:TPU:0")


def _gpu(major: int, minor: int, index: int = 0) -> DeviceDescription:
    return DeviceDescription("GPU", f"/physical_device:GPU:{index}", (major, minor))


def _example(png: bytes, label: int | None = None, **extra: tf.train.Feature) -> bytes:
    feature = {IMAGE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])), **extra}
    if label is not None:
        feature[LABEL_KEY] = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _write_digits_examples(root: str, count: int) -> str:
    return write_digits_examples(root, count)


def _fn_args(examples_uri: str, out: str, **trainer: object) -> FnArgs:
    input_size = trainer.pop("input_size", [16, 16])
    model = trainer.pop("model", "seed_cnn")
    params = trainer.pop("params", {})
    return FnArgs(
        train_files=[os.path.join(split_dir(examples_uri, TRAIN_SPLIT), "*")],
        eval_files=[os.path.join(split_dir(examples_uri, EVAL_SPLIT), "*")],
        serving_model_dir=os.path.join(out, "Format-Serving"),
        model_run_dir=os.path.join(out, "model_run"),
        base_model=trainer.pop("base_model", None),
        custom_config={
            "data": {"channels": "auto"},
            "model": {"name": model, "input_size": input_size, "params": params},
            "trainer": {"epochs": 2, "batch_size": 32, **trainer},
            "export": {"serving_precision": "float32"},
        },
    )


def _serialized(file_patterns: list[str]) -> list[bytes]:
    files = data_lib.list_files(file_patterns)
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type=COMPRESSION)]


def _convert_to_tflite(saved_model_dir: str) -> bytes:
    """Converts predict_normalized with TF Lite builtin ops only (fails on float16 ops)."""
    converter = tf.lite.TFLiteConverter.from_saved_model(
        saved_model_dir, signature_keys=["predict_normalized"]
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory) -> str:
    return _write_digits_examples(str(tmp_path_factory.mktemp("digits")), NUM_IMAGES)


@pytest.fixture(scope="module")
def trained(examples_uri, tmp_path_factory) -> FnArgs:
    """run_fn with the defaults (auto precision/strategy/xla), 2 epochs."""
    fn_args = _fn_args(examples_uri, str(tmp_path_factory.mktemp("trained")))
    module.run_fn(fn_args)
    return fn_args


# --- precision, XLA and strategy resolution -------------------------------------------


@pytest.mark.parametrize("requested", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_requested_precision_passes_through(requested):
    assert resolve_precision_policy(requested, [CPU])[0] == requested


def test_unknown_precision_is_named():
    with pytest.raises(ValueError, match="precision='fp16'"):
        resolve_precision_policy("fp16", [CPU])


@pytest.mark.parametrize(
    "requested, devices, enabled",
    [
        ("auto", [CPU], False),
        ("auto", [CPU, _gpu(7, 0)], True),
        ("auto", [CPU, TPU], True),
        ("on", [CPU], True),
        (False, [CPU, _gpu(8, 0)], False),
    ],
)
def test_xla_resolution(requested, devices, enabled):
    assert resolve_xla(requested, devices)[0] is enabled


def test_unknown_xla_setting_is_named():
    with pytest.raises(ValueError, match="xla='sometimes'"):
        resolve_xla("sometimes", [CPU])


def test_this_machine_is_described_with_a_cpu():
    assert any(d.kind == "CPU" for d in describe_devices())


@pytest.mark.parametrize(
    "devices, tf_config, name",
    [
        ([CPU], {}, "default"),
        ([CPU, _gpu(8, 0)], {}, "default"),
        ([CPU, _gpu(8, 0), _gpu(8, 0, index=1)], {}, "mirrored"),
        ([CPU], {"cluster": {"worker": ["a:1", "b:1"]}}, "multi_worker"),
    ],
)
def test_auto_strategy_name(devices, tf_config, name):
    assert strategy.choose_strategy_name("auto", devices, tf_config) == name


@pytest.mark.parametrize("requested", ["default", "one_device", "mirrored"])
def test_strategies_are_created_with_one_replica_on_this_cpu(requested):
    created, name = strategy.resolve_strategy(requested, describe_devices(), tf_config={})
    assert name == requested
    assert created.num_replicas_in_sync == 1


def test_unknown_strategy_is_named():
    with pytest.raises(ValueError, match="strategy='horovod'"):
        strategy.choose_strategy_name("horovod", [CPU], {})


@pytest.mark.parametrize(
    "tf_config, chief",
    [
        ({}, True),
        ({"cluster": {"worker": ["a", "b"]}, "task": {"type": "worker", "index": 0}}, True),
        ({"cluster": {"worker": ["a", "b"]}, "task": {"type": "worker", "index": 1}}, False),
        ({"cluster": {"chief": ["c"], "worker": ["a"]}, "task": {"type": "worker"}}, False),
        ({"cluster": {"chief": ["c"], "worker": ["a"]}, "task": {"type": "chief"}}, True),
    ],
)
def test_only_the_chief_exports(tf_config, chief):
    # The Trainer and the pod entrypoint share this one is_chief (components/pod_env.py).
    assert pod_env.is_chief(tf_config) is chief


# --- data -----------------------------------------------------------------------------


def test_label_names_come_from_beside_split_train(examples_uri):
    pattern = os.path.join(examples_uri, "Split-train", "*")
    assert examples_uri_of([pattern]) == examples_uri
    assert read_label_names(examples_uri_of([pattern])) == LABEL_NAMES


def test_missing_labels_file_is_named(tmp_path):
    (tmp_path / "Split-train").mkdir()
    with pytest.raises(LabelNamesMissing, match=str(tmp_path / "labels.json")) as raised:
        read_label_names(examples_uri_of([str(tmp_path / "Split-train" / "*")]))
    assert isinstance(raised.value, ValueError)  # what the Trainer always raised


def test_train_files_outside_a_split_train_folder_are_named(tmp_path):
    with pytest.raises(ValueError, match="No Split-train folder .* train_files=.*elsewhere"):
        examples_uri_of([str(tmp_path / "elsewhere" / "*")])


def test_unmatched_file_pattern_is_named(tmp_path):
    with pytest.raises(ValueError, match="nothing-here"):
        data_lib.list_files([str(tmp_path / "nothing-here" / "*")])


@pytest.mark.parametrize("channels", [1, 3])
def test_dataset_yields_normalised_images_at_the_input_size(examples_uri, channels):
    patterns = [os.path.join(examples_uri, "Split-train", "*")]
    assert data_lib.read_channels(patterns) == 1
    num_train = NUM_IMAGES - int(round(NUM_IMAGES * EVAL_FRACTION))
    assert data_lib.count_examples(patterns) == num_train
    dataset = data_lib.make_dataset(
        patterns, [12, 10], channels, batch_size=64, shuffle=True, num_examples=num_train
    )
    images, labels = next(iter(dataset))
    assert images.shape == (64, 12, 10, channels) and images.dtype == tf.float32
    assert labels.dtype == tf.int64 and set(labels.numpy()) <= set(range(10))
    assert 0.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0
    assert float(tf.reduce_max(images)) > 0.9  # digits strokes reach full intensity
    assert len(list(dataset)) == -(-num_train // 64)


def _one_epoch(dataset: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
    images, labels = zip(*dataset.as_numpy_iterator(), strict=True)
    return np.concatenate(images), np.concatenate(labels)


def test_decoded_images_are_cached_in_memory_and_reshuffled_every_epoch(examples_uri, tmp_path):
    shutil.copytree(os.path.join(examples_uri, "Split-train"), tmp_path / "Split-train")
    patterns = [str(tmp_path / "Split-train" / "*")]
    count = data_lib.count_examples(patterns)
    make = functools.partial(data_lib.make_dataset, patterns, [12, 10], 1, batch_size=16,
                             shuffle=True, num_examples=count)
    cached, uncached = make(), make(cache_max_mb=0)
    first_images, first_labels = _one_epoch(cached)
    _one_epoch(uncached)
    shutil.rmtree(tmp_path / "Split-train")  # later epochs must not need the files

    second_images, second_labels = _one_epoch(cached)
    assert len(second_labels) == count
    assert not np.array_equal(first_labels, second_labels)  # a new order
    np.testing.assert_array_equal(  # the same images
        np.sort(first_images.reshape(count, -1).sum(axis=1)),
        np.sort(second_images.reshape(count, -1).sum(axis=1)),
    )
    with pytest.raises(tf.errors.NotFoundError):  # without the cache: decoded every epoch
        _one_epoch(uncached)


def test_data_larger_than_the_cache_limit_is_not_cached(examples_uri, tmp_path):
    shutil.copytree(os.path.join(examples_uri, "Split-train"), tmp_path / "Split-train")
    patterns = [str(tmp_path / "Split-train" / "*")]
    count = data_lib.count_examples(patterns)
    # count images of 12x10x1 float32 (+ an int64 label) need count * 488 bytes.
    dataset = data_lib.make_dataset(patterns, [12, 10], 1, batch_size=16, shuffle=False,
                                    num_examples=count, cache_max_mb=count * 480 / 2**20)
    _one_epoch(dataset)
    shutil.rmtree(tmp_path / "Split-train")
    with pytest.raises(tf.errors.NotFoundError):
        _one_epoch(dataset)


# --- run_fn and the exported model ----------------------------------------------------


def _summary(fn_args: FnArgs) -> dict:
    with open(os.path.join(fn_args.model_run_dir, module.SUMMARY_FILE)) as f:
        return json.load(f)


def test_run_fn_writes_the_training_summary(trained):
    summary = _summary(trained)
    assert SUMMARY_KEYS <= set(summary)
    tuning = summary["autotune"]
    # autotune measures only where several cells are plausible (a bfloat16 CPU);
    # elsewhere the static rule stands.
    assert summary["precision"] == (
        tuning["choice"]["precision"] if tuning["status"] == "measured"
        else resolve_precision_policy("auto", describe_devices())[0])
    assert summary["xla"] is False
    assert summary["strategy"] == "default" and summary["replicas"] == 1
    assert summary["global_batch_size"] == 32 and summary["input_size"] == [16, 16]
    assert summary["channels"] == 1 and summary["label_names"] == LABEL_NAMES
    assert summary["images_per_sec"] > 0
    history = summary["history"]
    assert {"loss", "accuracy", "val_loss", "val_accuracy", "images_per_sec", "loss_scale",
            "gradient_norm", "learning_rate"} <= set(history)
    assert all(len(v) == 2 for v in history.values())
    assert all(rate > 0 for rate in history["images_per_sec"])
    assert history["loss_scale"] == [None, None]  # no loss scaling outside float16
    assert all(norm > 0 for norm in history["gradient_norm"])
    assert summary["lint"] == "passed" and summary["warm_started_from"] is None
    assert summary["resumed_at_epoch"] is None and summary["skipped_steps"] == 0
    assert tf.io.gfile.glob(os.path.join(trained.model_run_dir, "logs", "*"))


def _tensorboard_tags(model_run_dir: str) -> set[str]:
    tags = set()
    for path in tf.io.gfile.glob(os.path.join(model_run_dir, "logs", "train", "*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


def _fit_with_tensorboard(callback_class: type, log_dir: str, update_freq: object) -> None:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.random.default_rng(0).random((64, 3), dtype=np.float32)
    model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0,
              callbacks=[callback_class(log_dir, update_freq=update_freq)])


def _event_kinds(log_dir: str) -> tuple[set[str], bool]:
    tags, graph = set(), False
    for path in tf.io.gfile.glob(os.path.join(log_dir, "train", "*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
            graph = graph or bool(event.graph_def)
    return tags, graph


@pytest.mark.parametrize("update_freq", ["epoch", 1])
def test_epoch_tensorboard_writes_what_keras_tensorboard_writes(tmp_path, update_freq):
    _fit_with_tensorboard(keras.callbacks.TensorBoard, str(tmp_path / "keras"), update_freq)
    _fit_with_tensorboard(EpochTensorBoard, str(tmp_path / "ours"), update_freq)
    tags, graph = _event_kinds(str(tmp_path / "ours"))
    assert (tags, graph) == _event_kinds(str(tmp_path / "keras"))
    assert "epoch_loss" in tags
    assert ("batch_loss" in tags) is (update_freq == 1)


def test_keras_weights_are_saved_beside_the_serving_model(trained):
    path = os.path.join(os.path.dirname(trained.serving_model_dir), "Format-Keras",
                        "model.weights.h5")
    float_model = models.build_model("seed_cnn", (16, 16, 1), 10)
    float_model.load_weights(path)
    served = tf.saved_model.load(trained.serving_model_dir)
    images = np.random.default_rng(2).random((3, 16, 16, 1), dtype=np.float32)
    np.testing.assert_allclose(
        served.signatures["predict_normalized"](images=tf.constant(images))["probabilities"],
        float_model(images, training=False), atol=1e-6,
    )


def test_serving_signatures_agree(trained):
    loaded = tf.saved_model.load(trained.serving_model_dir)
    assert set(loaded.signatures) == {"serving_default", "predict_image_bytes", "predict_images",
                                      "predict_normalized"}
    # Serving needs only the image: strip every other feature.
    serialized = _serialized(trained.eval_files)[:20]
    pngs = [
        tf.train.Example.FromString(s).features.feature[IMAGE_KEY].bytes_list.value[0]
        for s in serialized
    ]
    image_only = [_example(png) for png in pngs]
    by_example = loaded.signatures["serving_default"](examples=tf.constant(image_only))

    uint8_images = tf.stack([tf.io.decode_png(png, channels=1) for png in pngs])
    by_image = loaded.signatures["predict_images"](images=uint8_images)
    normalized = data_lib.preprocess_images(uint8_images, [16, 16])
    by_normalized = loaded.signatures["predict_normalized"](images=normalized)

    assert by_example["probabilities"].dtype == tf.float32
    assert by_example["probabilities"].shape == (20, 10)
    assert by_example["class_id"].dtype == tf.int64
    np.testing.assert_array_equal(by_example["class_id"], by_image["class_id"])
    np.testing.assert_allclose(by_example["probabilities"], by_image["probabilities"], atol=1e-6)
    np.testing.assert_allclose(
        by_example["probabilities"], by_normalized["probabilities"], atol=1e-6
    )
    names = [LABEL_NAMES[i] for i in by_example["class_id"].numpy()]
    assert [n.decode() for n in by_example["class_name"].numpy()] == names
    assert set(by_normalized) == {"probabilities"}


def test_the_monitoring_reference_describes_the_eval_split_and_the_models_answers(trained):
    # mptfx monitor compares served traffic with these statistics (components/monitor/).
    import tensorflow_data_validation as tfdv

    from components.monitor.reference import read_reference

    reference = read_reference(trained.serving_model_dir)
    serialized = _serialized(trained.eval_files)
    assert reference.counts == {"eval": len(serialized), "train": NUM_IMAGES - len(serialized)}
    assert reference.label_names == LABEL_NAMES
    dataset = reference.eval_statistics.datasets[0]
    assert dataset.num_examples == len(serialized)
    height = tfdv.get_feature_stats(dataset, tfdv.FeaturePath(["height"])).num_stats
    assert height.min == height.max == 8  # the digits as stored, not the model's 16 x 16
    answers = tf.saved_model.load(trained.serving_model_dir).signatures["serving_default"](
        examples=tf.constant(serialized))["class_name"].numpy()
    predicted = tfdv.get_feature_stats(dataset, tfdv.FeaturePath(["predicted_class"]))
    counted = {v.value: v.frequency for v in predicted.string_stats.top_values}
    assert counted == {name.decode(): float(list(answers).count(name)) for name in set(answers)}


def test_serving_accepts_other_image_sizes_and_empty_batches(trained):
    loaded = tf.saved_model.load(trained.serving_model_dir)
    large = loaded.signatures["predict_images"](images=tf.zeros([3, 40, 30, 1], tf.uint8))
    assert large["probabilities"].shape == (3, 10)
    empty = loaded.signatures["serving_default"](examples=tf.constant([], tf.string))
    assert empty["probabilities"].shape == (0, 10) and empty["class_name"].shape == (0,)


def test_mixed_float16_training_exports_a_float32_tflite_ready_model(examples_uri, tmp_path):
    fn_args = _fn_args(
        examples_uri, str(tmp_path), epochs=1, precision="mixed_float16", input_size=[8, 8]
    )
    module.run_fn(fn_args)
    assert keras.mixed_precision.global_policy().name == "float32"  # restored
    summary = _summary(fn_args)
    assert summary["precision"] == "mixed_float16"
    assert summary["history"]["loss_scale"] == [32768.0]  # 2^15, no overflow in one epoch
    assert summary["loss_scale"] == {"dynamic": True, "initial": 32768.0, "growth_steps": 2000,
                                     "final": 32768.0}
    # TensorBoard: loss, metrics, learning rate, loss scale, gradient norm, throughput.
    assert {"epoch_loss", "epoch_accuracy", "epoch_learning_rate", "epoch_loss_scale",
            "epoch_gradient_norm", "epoch_images_per_sec"} <= _tensorboard_tags(
        fn_args.model_run_dir)

    reader = tf.train.load_checkpoint(
        os.path.join(fn_args.serving_model_dir, "variables", "variables")
    )
    float_dtypes = [
        dtype
        for name, dtype in reader.get_variable_to_dtype_map().items()
        if "VARIABLE_VALUE" in name and dtype.is_floating
    ]
    assert len(float_dtypes) >= 8  # 4 kernels + 4 biases
    assert set(float_dtypes) == {tf.float32}

    interpreter = tf.lite.Interpreter(model_content=_convert_to_tflite(fn_args.serving_model_dir))
    runner = interpreter.get_signature_runner("predict_normalized")
    images = np.random.default_rng(0).random((1, 8, 8, 1), dtype=np.float32)
    lite = runner(images=images)["probabilities"]
    saved = tf.saved_model.load(fn_args.serving_model_dir)
    expected = saved.signatures["predict_normalized"](images=tf.constant(images))
    np.testing.assert_allclose(lite, expected["probabilities"], atol=1e-5)


def test_a_users_lstm_trains_with_its_recurrent_layers_in_float32_at_an_automatic_batch(
        examples_uri, tmp_path, restore_dtype_policy):
    """A user's model file (tests/data/user_models/lstm_rows.py, an LSTM reading a digit row by
    row) under mixed_float16 with `trainer.recurrent_precision: float32`, at `batch_size:
    auto` under a 16 MB cap, as the Trainer of a pipeline run receives them: the check
    `mptfx run` makes before the Ingest says so in one line, the trained model's LSTM computes
    in float32 (read from its layers) and the training summary (summary.json's `trainer`)
    records both choices and why."""
    from components.trainer.model_check import check_model_file

    lstm_file = Path(__file__).resolve().parents[1] / "data" / "user_models" / "lstm_rows.py"
    fn_args = _fn_args(examples_uri, str(tmp_path), epochs=1, precision="mixed_float16",
                       recurrent_precision="float32", batch_size="auto", batch_memory_mb=16,
                       autotune="off", input_size=[8, 8], params={"units": 16})
    fn_args.custom_config["model"]["module_file"] = str(lstm_file)
    [note] = check_model_file(str(lstm_file), "build_model", "classification", {"units": 16},
                              (8, 8, 1), "mixed_float16", "float32")
    assert note == (f"model.module_file {lstm_file}: recurrent layer(s) 'rows_lstm' (LSTM) kept "
                    "in float32 under mixed_float16 (trainer.recurrent_precision: float32)")
    module.run_fn(fn_args)
    summary = _summary(fn_args)
    assert summary["precision"] == "mixed_float16"
    assert summary["model_file_staged"] == str(lstm_file)
    assert summary["recurrent_precision"] == "float32"
    assert summary["recurrent_layers"] == {"rows_lstm": "float32"}
    batch = summary["batch_size"]
    assert batch % 8 == 0
    assert summary["batch_size_reason"].startswith(
        f"batch_size auto under mixed_float16: {batch} (")
    assert "trainer.batch_memory_mb 16 MB" in summary["batch_size_reason"]
    assert summary["autotune_probe_seconds"] >= 0


def test_export_rebuilds_in_float32_and_keeps_the_callers_policy(tmp_path, restore_dtype_policy):
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    trained = models.build_model("seed_cnn", (8, 8, 1), 3, dropout=0.2)
    export_dir = export_lib.export_serving_model(
        trained, "seed_cnn", {"dropout": 0.2}, [8, 8], 1, ["a", "b", "c"], str(tmp_path / "m")
    )
    assert keras.mixed_precision.global_policy().name == "mixed_float16"
    assert _convert_to_tflite(export_dir)
    loaded = tf.saved_model.load(export_dir)
    images = np.random.default_rng(1).random((2, 8, 8, 1), dtype=np.float32)
    served = loaded.signatures["predict_normalized"](images=tf.constant(images))
    np.testing.assert_allclose(served["probabilities"], trained(images), atol=2e-3)


def test_images_per_sec_is_the_median_after_the_first_epoch():
    throughput = ThroughputCallback(examples_per_epoch=100)
    throughput.epoch_images_per_sec = [5.0, 40.0, 10.0, 30.0]
    assert throughput.images_per_sec == 30.0
    throughput.epoch_images_per_sec = [5.0]
    assert throughput.images_per_sec == 5.0


def test_bad_config_values_are_named(examples_uri, tmp_path):
    """run_fn refuses what the pipeline's config refuses, in one line naming the key."""
    fn_args = _fn_args(examples_uri, str(tmp_path), precision="half")
    with pytest.raises(ValueError, match=r"'trainer.precision'.*received 'half'"):
        module.run_fn(fn_args)
    fn_args = _fn_args(examples_uri, str(tmp_path))
    fn_args.custom_config["export"]["serving_precision"] = "float16"
    with pytest.raises(ValueError, match=r"'export.serving_precision'.*received 'float16'"):
        module.run_fn(fn_args)
    fn_args = _fn_args(examples_uri, str(tmp_path))
    fn_args.custom_config["data"]["channels"] = "4"  # the config never allowed 4 channels
    with pytest.raises(ValueError, match=r"'data.channels'.*received '4'"):
        module.run_fn(fn_args)
    fn_args = _fn_args(examples_uri, str(tmp_path), epoch=3)
    with pytest.raises(ValueError, match="unknown config key 'trainer.epoch'") as error:
        module.run_fn(fn_args)
    assert "\n" not in str(error.value)


# --- warm start -------------------------------------------------------------------------


def test_warm_start_continues_from_the_base_models_keras_weights(examples_uri, tmp_path, trained):
    fn_args = _fn_args(examples_uri, str(tmp_path / "warm"), epochs=1, warm_start=True,
                       base_model=trained.serving_model_dir)
    module.run_fn(fn_args)
    summary = _summary(fn_args)
    base_path = os.path.join(os.path.dirname(trained.serving_model_dir), "Format-Keras",
                             "model.weights.h5")
    assert summary["warm_started_from"] == base_path
    # It starts where the base model ended, far better than the first epoch from scratch.
    base = _summary(trained)
    assert summary["history"]["loss"][0] < base["history"]["loss"][0]


def test_warm_start_from_another_architecture_trains_from_scratch(examples_uri, tmp_path, trained):
    fn_args = _fn_args(examples_uri, str(tmp_path / "other"), epochs=1, warm_start=True,
                       base_model=trained.serving_model_dir, params={"dense_units": 32})
    module.run_fn(fn_args)
    assert _summary(fn_args)["warm_started_from"] is None


def test_without_warm_start_the_base_model_is_ignored(examples_uri, tmp_path, trained):
    fn_args = _fn_args(examples_uri, str(tmp_path / "cold"), epochs=1,
                       base_model=trained.serving_model_dir)
    module.run_fn(fn_args)
    assert _summary(fn_args)["warm_started_from"] is None


# --- lint and segmentation through run_fn -----------------------------------------------


def test_an_unsafe_model_fails_before_training(examples_uri, tmp_path):
    @models.register_model("test_unsafe_head")
    def build(input_shape, num_classes):
        inputs = keras.Input(shape=input_shape)
        x = keras.layers.Flatten()(inputs)
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax",
                                                      name="unsafe_head")(x))

    try:
        fn_args = _fn_args(examples_uri, str(tmp_path), model="test_unsafe_head",
                           precision="mixed_float16")
        with pytest.raises(MixedPrecisionLintError, match="'unsafe_head'"):
            module.run_fn(fn_args)
    finally:
        unregister_model("test_unsafe_head")
    assert not os.path.exists(os.path.join(fn_args.model_run_dir, "logs"))  # no step ran


def test_the_train_step_is_traced_once(examples_uri, tmp_path, monkeypatch):
    """The compile's variables (the optimizer's slots, the metrics') exist before the first
    step (components/trainer/fit.py): a tf.function that creates variables while it traces
    is traced twice, which cost ResNet-50 about 10 s of a one-epoch Trainer. The train
    step's Python body runs once per trace."""
    from components.trainer.training_model import TrainingModel

    traced = []
    train_step = TrainingModel.train_step

    def counted(self, data):
        traced.append(data)
        return train_step(self, data)

    monkeypatch.setattr(TrainingModel, "train_step", counted)
    fit_fields(fn_args_dict(examples_uri, str(tmp_path), input_size=(16, 16), autotune="off",
                            epochs=2))
    assert len(traced) == 1
