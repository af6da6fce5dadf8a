"""The Beam-based readers of what mptfx writes, for real: a TFX pipeline (LocalDagRunner) of
the Ingest, StatisticsGen and SchemaGen, and TFMA evaluating the Trainer's float32 and
`export.serving_precision: mixed` serving signatures. (Beam pipelines: not in tests/unit.)"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components.examples_format import COMPRESSION, LABEL_KEY
from components.ingest.selection import select_folder, stage_listing
from components.trainer import data as data_lib
from components.trainer import module
from tests.trainer_testdata import (
    fn_args_dict,
    make_fn_args,
    train_mixed_serving,
    write_digits_examples,
)

NUM_IMAGES = 300


def _image_tree(root: Path, per_class: int, classes: tuple[str, ...]) -> Path:
    rng = np.random.default_rng(7)
    for name in classes:
        (root / name).mkdir(parents=True)
        for index in range(per_class):
            image = rng.integers(0, 256, (8, 10, 3), dtype=np.uint8)
            Image.fromarray(image, "RGB").save(root / name / f"img_{index:03d}.png")
    return root


def _serialized(file_patterns: list[str]) -> list[bytes]:
    files = data_lib.list_files(file_patterns)
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type=COMPRESSION)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """run_fn with the default precision, strategy and XLA rules, 2 epochs, float32 export."""
    root = str(tmp_path_factory.mktemp("trained"))
    examples_uri = write_digits_examples(root, NUM_IMAGES)
    fn_args = make_fn_args(fn_args_dict(examples_uri, os.path.join(root, "out"),
                                        input_size=(16, 16), precision="auto"))
    module.run_fn(fn_args)
    return fn_args


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """run_fn under mixed_bfloat16 with `export.serving_precision: mixed`."""
    return train_mixed_serving(str(tmp_path_factory.mktemp("mixed")), NUM_IMAGES)


def test_statistics_gen_and_schema_gen_read_the_output(tmp_path):
    from ml_metadata.metadata_store import metadata_store
    from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2
    from tfx import v1 as tfx

    from components.ingest.component import ImageExampleGen

    root = _image_tree(tmp_path / "data", per_class=20, classes=("0", "1"))
    metadata_config = tfx.orchestration.metadata.sqlite_metadata_connection_config(
        str(tmp_path / "metadata.sqlite")
    )
    selection = stage_listing(replace(select_folder(root), span=3), tmp_path / "root")
    ingest_node = ImageExampleGen(data_selection=selection.parameter(), image_size="[8, 8]")
    statistics = tfx.components.StatisticsGen(examples=ingest_node.outputs["examples"])
    schema = tfx.components.SchemaGen(statistics=statistics.outputs["statistics"])
    tfx.orchestration.LocalDagRunner().run(
        tfx.dsl.Pipeline(
            pipeline_name="ingest-test",
            pipeline_root=str(tmp_path / "root"),
            components=[ingest_node, statistics, schema],
            metadata_connection_config=metadata_config,
        )
    )

    store = metadata_store.MetadataStore(metadata_config)
    (examples,) = store.get_artifacts_by_type("Examples")
    assert json.loads(examples.properties["split_names"].string_value) == ["train", "eval"]
    assert examples.custom_properties["payload_format"].string_value == "FORMAT_TF_EXAMPLE"
    assert examples.custom_properties["span"].int_value == 3
    (statistics_uri,) = (a.uri for a in store.get_artifacts_by_type("ExampleStatistics"))
    counts = {}
    for split in ("train", "eval"):
        stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(
            Path(statistics_uri, f"Split-{split}", "FeatureStats.pb").read_bytes()
        )
        counts[split] = stats.datasets[0].num_examples
    assert sum(counts.values()) == 40 and min(counts.values()) > 0
    (schema_uri,) = (a.uri for a in store.get_artifacts_by_type("Schema"))
    from google.protobuf import text_format

    parsed = text_format.Parse(Path(schema_uri, "schema.pbtxt").read_text(), schema_pb2.Schema())
    assert {"image", "label"} <= {feature.name for feature in parsed.feature}


def test_tfma_evaluates_the_serving_signature(trained, tmp_path):
    import tensorflow_model_analysis as tfma

    eval_config = tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name="serving_default",
                label_key=LABEL_KEY,
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
        tf.train.Example.FromString(s).features.feature[LABEL_KEY].int64_list.value[0]
        for s in serialized
    ]
    loaded = tf.saved_model.load(trained.serving_model_dir)
    class_ids = loaded.signatures["serving_default"](examples=tf.constant(serialized))["class_id"]
    assert tfma_accuracy == pytest.approx(np.mean(class_ids.numpy() == np.array(labels)))


def test_tfma_evaluates_the_mixed_serving_signature(mixed, tmp_path):
    import tensorflow_model_analysis as tfma

    fn_args, _, _ = mixed
    eval_config = tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name="serving_default", label_key="label",
                                    prediction_key="probabilities")],
        metrics_specs=[
            tfma.MetricsSpec(metrics=[tfma.MetricConfig(class_name="SparseCategoricalAccuracy")])
        ],
        slicing_specs=[tfma.SlicingSpec()],
    )
    result = tfma.run_model_analysis(
        eval_shared_model=tfma.default_eval_shared_model(
            eval_saved_model_path=fn_args.serving_model_dir, eval_config=eval_config),
        eval_config=eval_config,
        data_location=fn_args.eval_files[0],
        file_format="tfrecords",
        output_path=str(tmp_path),
    )
    accuracy = result.slicing_metrics[0][1][""][""]["sparse_categorical_accuracy"]["doubleValue"]
    assert accuracy > 0.3  # 3 epochs on 240 digits; a broken graph scores ~0.1
