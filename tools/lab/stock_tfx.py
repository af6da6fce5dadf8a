"""A stock TFX pipeline doing the default `mptfx run`'s job, the way TFX's templates do it.

ImportExampleGen (the digits' tf.Examples) -> StatisticsGen -> SchemaGen -> Trainer (a plain
Keras run_fn of the same model, epochs and batch: stock_tfx_module.py) -> Evaluator
(accuracy threshold) -> Pusher, run by TFX's LocalDagRunner with an sqlite ML Metadata. The
bench times it beside `mptfx run` in the same run (`stock_tfx` in results.json).

    python -m tools.lab.stock_tfx EXAMPLES_DIR WORK_DIR '{"epochs": 15, "batch_size": 32,
        "input_size": [16, 16]}'
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

PIPELINE_NAME = "stock-tfx-digits"


def create_pipeline(examples_dir: str, work_dir: str, training: dict[str, Any]):
    """TFX's template pipeline: components in data-flow order, one `tfx.dsl.Pipeline`."""
    import tensorflow_model_analysis as tfma
    from tfx import v1 as tfx

    example_gen = tfx.components.ImportExampleGen(
        input_base=examples_dir,
        input_config=tfx.proto.Input(splits=[
            tfx.proto.Input.Split(name="train", pattern="Split-train/*"),
            tfx.proto.Input.Split(name="eval", pattern="Split-eval/*"),
        ]),
    )
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs["statistics"], infer_feature_shape=True)
    trainer = tfx.components.Trainer(
        module_file=os.path.join(os.path.dirname(__file__), "stock_tfx_module.py"),
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        train_args=tfx.proto.TrainArgs(num_steps=0),
        eval_args=tfx.proto.EvalArgs(num_steps=0),
        custom_config=dict(training),
    )
    eval_config = tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name="serving_default", label_key="label")],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=[tfma.MetricConfig(
            class_name="SparseCategoricalAccuracy",
            threshold=tfma.MetricThreshold(
                value_threshold=tfma.GenericValueThreshold(lower_bound={"value": 0.5})))])],
    )
    evaluator = tfx.components.Evaluator(
        examples=example_gen.outputs["examples"], model=trainer.outputs["model"],
        eval_config=eval_config)
    pusher = tfx.components.Pusher(
        model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(
                base_directory=os.path.join(work_dir, "serving"))))
    return tfx.dsl.Pipeline(
        pipeline_name=PIPELINE_NAME,
        pipeline_root=os.path.join(work_dir, "tfx"),
        components=[example_gen, statistics_gen, schema_gen, trainer, evaluator, pusher],
        enable_cache=False,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.join(work_dir, "metadata.db")),
        beam_pipeline_args=["--direct_running_mode=in_memory", "--direct_num_workers=1"],
    )


def run(examples_dir: str, work_dir: str, training: dict[str, Any]) -> dict[str, Any]:
    """Runs the pipeline with LocalDagRunner; returns seconds and what was pushed.

    Args:
        training: {"epochs", "batch_size", "input_size"} of the default `mptfx run`.
    """
    started = time.perf_counter()
    from tfx import v1 as tfx

    imported = time.perf_counter() - started
    tfx.orchestration.LocalDagRunner().run(create_pipeline(examples_dir, work_dir, training))
    serving = os.path.join(work_dir, "serving")
    return {
        "import_seconds": round(imported, 1),
        "run_seconds": round(time.perf_counter() - started - imported, 1),
        "pushed_versions": sorted(os.listdir(serving)) if os.path.isdir(serving) else [],
    }


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))))
