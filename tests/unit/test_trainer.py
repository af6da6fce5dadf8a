"""Tests for the Trainer module: precision/XLA/strategy resolution, data, run_fn, export.

Everything runs for real on tiny scikit-learn digits Examples (8x8 grayscale PNGs).
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_digits
from tfx import v1 as tfx

import models
from components.trainer import data as data_lib
from components.trainer import export as export_lib
from components.trainer import module, strategy
from components.trainer.callbacks import ThroughputCallback
from components.trainer.precision import (
    DeviceDescription,
    describe_devices,
    resolve_precision_policy,
    resolve_xla,
)

NUM_IMAGES = 300
EVAL_FRACTION = 0.2
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
    feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])), **extra}
    if label is not None:
        feature["label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _write_digits_examples(root: str, count: int) -> str:
    """Writes `count` digits as ingest-style Examples under root; returns the Examples uri."""
    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    order = np.random.default_rng(0).permutation(len(images))[:count]
    num_eval = int(round(count * EVAL_FRACTION))
    uri = os.path.join(root, "examples")
    for split, indices in (("eval", order[:num_eval]), ("train", order[num_eval:])):
        os.makedirs(os.path.join(uri, f"Split-{split}"))
        path = os.path.join(uri, f"Split-{split}", "data_tfrecord-00000-of-00001.gz")
        with tf.io.TFRecordWriter(path, options="GZIP") as writer:
            for i in indices:
                label = int(digits.target[i])

                def ints(v):
                    return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

                def strings(v):
                    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))

                writer.write(
                    _example(
                        tf.io.encode_png(images[i]).numpy(),
                        label,
                        label_name=strings(str(label)),
                        height=ints(8),
                        width=ints(8),
                        channels=ints(1),
                        filename=strings(f"{label}/img_{i:04d}.png"),
                    )
                )
    with open(os.path.join(uri, "labels.json"), "w") as f:
        json.dump({"label_names": LABEL_NAMES}, f)
    return uri


def _fn_args(examples_uri: str, out: str, **trainer: object) -> tfx.components.FnArgs:
    input_size = trainer.pop("input_size", [16, 16])
    return tfx.components.FnArgs(
        train_files=[os.path.join(examples_uri, "Split-train", "*")],
        eval_files=[os.path.join(examples_uri, "Split-eval", "*")],
        serving_model_dir=os.path.join(out, "Format-Serving"),
        model_run_dir=os.path.join(out, "model_run"),
        custom_config={
            "data": {"channels": "auto"},
            "model": {"name": "seed_cnn", "input_size": input_size, "params": {}},
            "trainer": {"epochs": 2, "batch_size": 32, **trainer},
            "export": {"serving_precision": "float32"},
        },
    )


def _serialized(file_patterns: list[str]) -> list[bytes]:
    files = data_lib.list_files(file_patterns)
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def _convert_to_tflite(saved_model_dir: str) -> bytes:
    """Converts predict_normalized with TF Lite builtin ops only (fails on float16 ops)."""
    converter = tf.lite.TFLiteConverter.from_saved_model(
        saved_model_dir, signature_keys=["predict_normalized"]
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()


@pytest.fixture
def restore_dtype_policy():
    previous = keras.mixed_precision.global_policy()
    yield
    keras.mixed_precision.set_dtype_policy(previous)


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory) -> str:
    return _write_digits_examples(str(tmp_path_factory.mktemp("digits")), NUM_IMAGES)


@pytest.fixture(scope="module")
def trained(examples_uri, tmp_path_factory) -> tfx.components.FnArgs:
    """run_fn with the defaults (auto precision/strategy/xla), 2 epochs."""
    fn_args = _fn_args(examples_uri, str(tmp_path_factory.mktemp("trained")))
    module.run_fn(fn_args)
    return fn_args


# --- precision, XLA and strategy resolution -------------------------------------------


@pytest.mark.parametrize(
    "devices, prefer_bfloat16, policy, reason_part",
    [
        ([CPU], False, "float32", "CPU"),
        ([CPU, _gpu(6, 1)], False, "float32", "WARNING"),
        ([CPU, _gpu(7, 0)], False, "mixed_float16", "7.0"),
        ([CPU, _gpu(7, 0)], True, "mixed_float16", "7.0"),
        ([CPU, _gpu(8, 0)], False, "mixed_float16", "8.0"),
        ([CPU, _gpu(8, 0)], True, "mixed_bfloat16", "prefer_bfloat16"),
        ([CPU, _gpu(9, 0)], False, "mixed_float16", "9.0"),
        ([CPU, _gpu(9, 0)], True, "mixed_bfloat16", "prefer_bfloat16"),
        ([CPU, _gpu(8, 0), _gpu(6, 1, index=1)], False, "float32", "GPU:1"),
        ([CPU, _gpu(8, 6), _gpu(7, 5, index=1)], True, "mixed_float16", "7.5"),
        ([CPU, TPU], False, "mixed_bfloat16", "TPU"),
    ],
)
def test_auto_precision_follows_the_devices(devices, prefer_bfloat16, policy, reason_part):
    resolved, reason = resolve_precision_policy("auto", devices, prefer_bfloat16)
    assert resolved == policy
    assert reason_part in reason


def test_cpu_reason_says_why_float32():
    assert resolve_precision_policy("auto", [CPU]) == (
        "float32",
        "CPU: mixed precision is slower here; float32",
    )


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
    assert strategy.is_chief(tf_config) is chief


# --- data -----------------------------------------------------------------------------


def test_label_names_come_from_beside_split_train(examples_uri):
    pattern = os.path.join(examples_uri, "Split-train", "*")
    assert data_lib.read_label_names([pattern]) == LABEL_NAMES


def test_missing_labels_file_is_named(tmp_path):
    (tmp_path / "Split-train").mkdir()
    with pytest.raises(ValueError, match=str(tmp_path / "labels.json")):
        data_lib.read_label_names([str(tmp_path / "Split-train" / "*")])


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


# --- run_fn and the exported model ----------------------------------------------------


def test_run_fn_writes_the_training_summary(trained):
    path = os.path.join(trained.model_run_dir, module.SUMMARY_FILE)
    with open(path) as f:
        summary = json.load(f)
    assert SUMMARY_KEYS <= set(summary)
    assert summary["precision"] == "float32" and summary["xla"] is False
    assert summary["strategy"] == "default" and summary["replicas"] == 1
    assert summary["global_batch_size"] == 32 and summary["input_size"] == [16, 16]
    assert summary["channels"] == 1 and summary["label_names"] == LABEL_NAMES
    assert summary["images_per_sec"] > 0
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(summary["history"])
    assert all(len(v) == 2 for v in summary["history"].values())
    assert tf.io.gfile.glob(os.path.join(trained.model_run_dir, "logs", "*"))


def test_serving_signatures_agree(trained):
    loaded = tf.saved_model.load(trained.serving_model_dir)
    assert set(loaded.signatures) == {"serving_default", "predict_images", "predict_normalized"}
    # Serving needs only the image: strip every other feature.
    serialized = _serialized(trained.eval_files)[:20]
    pngs = [
        tf.train.Example.FromString(s).features.feature["image"].bytes_list.value[0]
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


def test_serving_accepts_other_image_sizes_and_empty_batches(trained):
    loaded = tf.saved_model.load(trained.serving_model_dir)
    large = loaded.signatures["predict_images"](images=tf.zeros([3, 40, 30, 1], tf.uint8))
    assert large["probabilities"].shape == (3, 10)
    empty = loaded.signatures["serving_default"](examples=tf.constant([], tf.string))
    assert empty["probabilities"].shape == (0, 10) and empty["class_name"].shape == (0,)


def test_tfma_evaluates_the_serving_signature(trained, tmp_path):
    import tensorflow_model_analysis as tfma

    eval_config = tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name="serving_default",
                label_key="label",
                prediction_key="probabilities",
            )
        ],
        metrics_specs=[
            tfma.MetricsSpec(metrics=[tfma.MetricConfig(class_name="SparseCategoricalAccuracy")])
        ],
        slicing_specs=[tfma.SlicingSpec()],
    )
    eval_shared_model = tfma.default_eval_shared_model(
        eval_saved_model_path=trained.serving_model_dir, eval_config=eval_config
    )
    result = tfma.run_model_analysis(
        eval_shared_model=eval_shared_model,
        eval_config=eval_config,
        data_location=trained.eval_files[0],
        file_format="tfrecords",
        output_path=str(tmp_path),
    )
    metrics = result.slicing_metrics[0][1][""][""]
    tfma_accuracy = metrics["sparse_categorical_accuracy"]["doubleValue"]

    serialized = _serialized(trained.eval_files)
    labels = [
        tf.train.Example.FromString(s).features.feature["label"].int64_list.value[0]
        for s in serialized
    ]
    loaded = tf.saved_model.load(trained.serving_model_dir)
    class_ids = loaded.signatures["serving_default"](examples=tf.constant(serialized))["class_id"]
    assert tfma_accuracy == pytest.approx(np.mean(class_ids.numpy() == np.array(labels)))


def test_mixed_float16_training_exports_a_float32_tflite_ready_model(examples_uri, tmp_path):
    fn_args = _fn_args(
        examples_uri, str(tmp_path), epochs=1, precision="mixed_float16", input_size=[8, 8]
    )
    module.run_fn(fn_args)
    assert keras.mixed_precision.global_policy().name == "float32"  # restored

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
    fn_args = _fn_args(examples_uri, str(tmp_path), precision="half")
    with pytest.raises(ValueError, match="precision='half'"):
        module.run_fn(fn_args)
    fn_args = _fn_args(examples_uri, str(tmp_path))
    fn_args.custom_config["export"]["serving_precision"] = "float16"
    with pytest.raises(ValueError, match="serving_precision='float16'"):
        module.run_fn(fn_args)
