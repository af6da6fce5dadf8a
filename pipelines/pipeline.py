"""The one mptfx pipeline. Every runner (local, Kubernetes, KFP export) takes what this builds.

Components in data-flow order: Ingest → StatisticsGen → SchemaGen → ExampleValidator →
DataValidationGate → Trainer → (latest blessed model) → Evaluator → InfraValidator → Pusher
→ TF Lite.
A segmentation model (unet3d) is gated on Dice instead of accuracy and has no TF Lite step
(its parity gate compares class predictions, which a voxel mask does not have).
"""

from __future__ import annotations

import json

import tensorflow_model_analysis as tfma

# The modules behind tfx.v1's names: `from tfx import v1` also imports tfx.v1.extensions
# (Google Cloud AI Platform's client), 4-5 s at the start of every `mptfx run` and compile.
from tfx.components import Evaluator, ExampleValidator, SchemaGen, StatisticsGen, Trainer
from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
from tfx.dsl.components.base.base_node import BaseNode
from tfx.dsl.components.common.resolver import Resolver
from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import (
    LatestBlessedModelStrategy,
)
from tfx.orchestration.metadata import sqlite_metadata_connection_config
from tfx.orchestration.pipeline import Pipeline
from tfx.types.channel import Channel
from tfx.types.standard_artifacts import Model, ModelBlessing

from components.examples_format import EVAL_SPLIT, LABEL_KEY, MASK_KEY
from components.infra.component import InfraValidator
from components.ingest.beam_ingest import LOCAL_INGEST_BEAM_ARGS
from components.ingest.component import ImageExampleGen
from components.ingest.selection import DataSelection
from components.pusher.component import AtomicPusher
from components.tflite.component import TFLiteExport
from components.validation.gate import DataValidationGate
from models import SEGMENTATION
from models.user_module import stage_module_file
from pipelines.config import Config
from pipelines.distill import resolve_teacher
from pipelines.workspace import Workspace

TRAINER_RUN_FN = "components.trainer.module.run_fn"
# Beam's DirectRunner (2.74) first tries PrismRunner, which downloads a binary from the
# internet at run time. Pipelines that allow unsafe triggers are never sent to Prism (our
# batch pipelines use no triggers at all), so the in-process FnApiRunner runs them offline.
#
# --requirements_file=/dev/null: given no dependency flag, every Beam component
# (StatisticsGen, Evaluator, ...) first builds a TFX sdist for remote workers
# (tfx.utils.dependency_utils.build_ephemeral_package, a `setup.py sdist` of TFX: 24 s
# each on the loaded CI machine). The in-process DirectRunner never stages anything, so
# naming an empty requirements file skips that build; remote runners
# (kubernetes.beam_pipeline_args) replace these arguments altogether.
#
# The default when `pipeline.beam_pipeline_args` is [] (Flink, Spark, Dataflow: README).
LOCAL_BEAM_ARGS = [
    "--direct_running_mode=in_memory",
    "--direct_num_workers=1",
    "--allow_unsafe_triggers",
    "--requirements_file=/dev/null",
]
PREDICTION_KEY = "probabilities"
DICE_METRIC = "dice"


def _gate(floor: float, max_regression: float) -> tfma.MetricThreshold:
    """A higher-is-better metric: at least `floor`, and at most `max_regression` below the
    baseline (the latest blessed model)."""
    return tfma.MetricThreshold(
        value_threshold=tfma.GenericValueThreshold(lower_bound={"value": floor}),
        change_threshold=tfma.GenericChangeThreshold(
            direction=tfma.MetricDirection.HIGHER_IS_BETTER,
            absolute={"value": -max_regression},
        ),
    )


def build_eval_config(config: Config, data_kind: str = "images") -> tfma.EvalConfig:
    """TFMA: accuracy with an absolute floor and a regression bound against the baseline,
    per-class accuracy (= recall, by slicing on the label) and a confusion matrix.

    For a segmentation model: Dice instead (see `build_segmentation_eval_config`).
    """
    if config.model.resolved_task(data_kind) == SEGMENTATION:
        return build_segmentation_eval_config(config)
    accuracy_threshold = _gate(config.evaluator.min_accuracy, config.evaluator.max_regression)
    return _eval_config(LABEL_KEY, [
        # A plain `threshold` would gate every slice, so one digit's recall under the floor
        # would fail the model; gate the overall slice only.
        tfma.MetricConfig(
            class_name="SparseCategoricalAccuracy",
            per_slice_thresholds=[
                tfma.PerSliceMetricThreshold(
                    slicing_specs=[tfma.SlicingSpec()], threshold=accuracy_threshold
                )
            ],
        ),
        tfma.MetricConfig(class_name="MultiClassConfusionMatrixPlot"),
    ])


def build_segmentation_eval_config(config: Config) -> tfma.EvalConfig:
    """TFMA for voxel masks: Dice over every eval voxel, with the `evaluator.min_dice` floor
    and the `evaluator.max_regression` bound against the baseline, overall and per object
    kind (slicing on `label`).

    Dice is TFMA's F1 score at threshold 0.5 on the flattened mask (the `mask` feature)
    and the served foreground `probabilities`: 2TP / (2TP + FP + FN) = 2|P∩T| / (|P|+|T|).
    """
    dice_threshold = _gate(config.evaluator.min_dice, config.evaluator.max_regression)
    return _eval_config(MASK_KEY, [
        tfma.MetricConfig(
            class_name="F1Score",
            config=f'"name": "{DICE_METRIC}", "thresholds": 0.5',
            threshold=dice_threshold,
        ),
    ])


def _eval_config(label_key: str, metrics: list) -> tfma.EvalConfig:
    """The serving_default model compared with `label_key`, sliced overall and by `label`,
    with ExampleCount before `metrics`."""
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name="serving_default",
                label_key=label_key,
                prediction_key=PREDICTION_KEY,
            )
        ],
        slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=[LABEL_KEY])],
        metrics_specs=[
            tfma.MetricsSpec(metrics=[tfma.MetricConfig(class_name="ExampleCount"), *metrics])
        ],
    )


def trainer_custom_config(config: Config, pipeline_root: str) -> dict:
    """The Trainer's custom_config; a user's model file is staged into `pipeline_root` and
    named there by path and sha256, so every runner imports that copy and TFX's cache keeps
    a Trainer only while the file is unchanged.

    Raises:
        UserModelError: the model file cannot be read (a UsageError for the CLI).
    """
    custom_config = config.trainer_custom_config()
    if config.model.module_file:
        staged = stage_module_file(config.model.module_file, pipeline_root)
        custom_config["model"].update(
            module_file=staged.path, module_sha256=staged.sha256, module_source=staged.source
        )
    return custom_config


def _trainer_custom_config(config: Config, workspace: Workspace) -> dict:
    """The Trainer's custom_config for a run in `workspace`: the model file staged in its
    pipeline root, the autotune cache in the workspace by default, and a distillation
    teacher's path (`champion` resolved; the Trainer reads nothing but its custom_config,
    and TFX's cache retrains when the champion changes)."""
    custom_config = trainer_custom_config(config, str(workspace.pipeline_root(
        config.pipeline.name)))
    trainer = custom_config["trainer"]
    trainer["autotune_cache_dir"] = trainer["autotune_cache_dir"] or str(
        workspace.root / "autotune")
    if config.trainer.distill.enabled:
        trainer["distill"]["teacher"] = resolve_teacher(config, workspace)[0]
    return custom_config


def create_pipeline(
    config: Config, workspace: Workspace, data: DataSelection, schema_file: str = ""
) -> Pipeline:
    """Build the pipeline for `config`, ingesting `data` (`resolve_data`'s selection).

    With `schema_file` (or `data.schema_file`) the data is validated against that schema
    (ImportSchemaGen) instead of one inferred from the data itself (SchemaGen), so a new
    drop that breaks it stops the run.
    """
    ingest = _ingest(config, data)
    statistics_gen, schema_gen, example_validator, data_gate = _data_checks(
        ingest, schema_file or config.data.schema_file)

    model_resolver = Resolver(
        strategy_class=LatestBlessedModelStrategy,
        model=Channel(type=Model),
        model_blessing=Channel(type=ModelBlessing),
    ).with_id("LatestBlessedModel")

    trainer = Trainer(
        run_fn=TRAINER_RUN_FN,
        examples=ingest.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        # The champion (latest blessed model) to start from, with trainer.warm_start.
        base_model=model_resolver.outputs["model"] if config.trainer.warm_start else None,
        custom_config=_trainer_custom_config(config, workspace),
    )
    trainer.add_upstream_node(data_gate)

    evaluator = Evaluator(
        examples=ingest.outputs["examples"],
        model=trainer.outputs["model"],
        baseline_model=model_resolver.outputs["model"],
        example_splits=[EVAL_SPLIT],
        eval_config=build_eval_config(config, data.kind),
    )
    publishers = _publishers(config, workspace, ingest, trainer, evaluator)
    components = [ingest, statistics_gen, schema_gen, example_validator, data_gate, trainer,
                  model_resolver, evaluator, *publishers]
    if config.model.resolved_task(data.kind) == SEGMENTATION:
        components = [c for c in components if c.id != "TFLite"]
    return Pipeline(
        pipeline_name=config.pipeline.name,
        pipeline_root=str(workspace.pipeline_root(config.pipeline.name)),
        components=components,
        enable_cache=config.pipeline.enable_cache,
        metadata_connection_config=sqlite_metadata_connection_config(
            str(workspace.metadata_path)
        ),
        beam_pipeline_args=config.pipeline.beam_pipeline_args or LOCAL_BEAM_ARGS,
    )


def _ingest(config: Config, data: DataSelection) -> ImageExampleGen:
    """The Ingest of the selection `resolve_data` made, with the data section's settings."""
    ingest = ImageExampleGen(
        # The selection resolve_data listed once, its listing stored by its hash: the
        # parameter changes exactly when a file does, so TFX's cache re-ingests exactly then.
        data_selection=data.parameter(),
        splits=json.dumps(config.data.splits),
        image_size=json.dumps(config.data.image_size),
        resize_method=config.data.resize_method,
        channels=config.data.channels,
        max_bad_fraction=config.data.max_bad_fraction,
        max_pixels=config.data.max_pixels,
        max_file_mb=config.data.max_file_mb,
        jpeg_quality=config.data.jpeg_quality,
        shard_mb=config.data.shard_mb,
        ingest_engine=config.data.ingest_engine,
    ).with_id("Ingest")
    if config.data.ingest_engine == "beam" and not config.pipeline.beam_pipeline_args:
        # In process: one DirectRunner worker per core for the Ingest, after (so over) the
        # single in-memory worker of LOCAL_BEAM_ARGS.
        ingest.with_beam_pipeline_args(LOCAL_INGEST_BEAM_ARGS)
    return ingest


def _data_checks(ingest: ImageExampleGen, schema_file: str) -> tuple[
        StatisticsGen, BaseNode, ExampleValidator,
        DataValidationGate]:
    """Statistics, the schema (imported from `schema_file`, else inferred), the anomalies
    against it, and the gate that stops the run on them."""
    statistics_gen = StatisticsGen(examples=ingest.outputs["examples"])
    if schema_file:
        schema_gen = ImportSchemaGen(schema_file=schema_file)
    else:
        schema_gen = SchemaGen(
            statistics=statistics_gen.outputs["statistics"], infer_feature_shape=True
        )
    example_validator = ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"]
    )
    data_gate = DataValidationGate(anomalies=example_validator.outputs["anomalies"])
    return statistics_gen, schema_gen, example_validator, data_gate


def _publishers(config: Config, workspace: Workspace, ingest: ImageExampleGen,
                trainer: Trainer, evaluator: Evaluator
                ) -> list[BaseNode]:
    """What follows a blessing: the TF Serving load check, the push, the TF Lite export."""
    # The blessed candidate loaded and queried as TF Serving will serve it (components/infra/).
    infra_validator = InfraValidator(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        examples=ingest.outputs["examples"],
        model_name=config.pusher.model_name,
        num_examples=config.infra.num_examples,
        max_load_seconds=config.infra.max_load_seconds,
        p99_latency_ms=config.infra.p99_latency_ms,
        memory_limit=config.infra.limits["memory"],
    ).with_id("InfraValidator")

    pusher = AtomicPusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        infra_blessing=infra_validator.outputs["blessing"],
        base_directory=workspace.serving_dir(config.pusher.model_name, config.pusher.serving_dir),
        keep_versions=config.pusher.keep_versions,
        rollout=config.pusher.rollout,
    ).with_id("Pusher")

    tflite = TFLiteExport(
        model=trainer.outputs["model"],
        examples=ingest.outputs["examples"],
        pushed_model=pusher.outputs["pushed_model"],
        variants=json.dumps(config.tflite.variants),
        publish_dir=str(workspace.tflite_dir(config.pusher.model_name)),
        uint8_io=int(config.tflite.uint8_io),
        representative_samples=config.tflite.representative_samples,
        parity_limit=config.tflite.parity_limit,
        keep_versions=config.pusher.keep_versions,
    ).with_id("TFLite")
    return [infra_validator, pusher, tflite]
