"""`auto_check`: does `auto` (the Trainer's measured choice) pick the fastest cell?

For each model of the throughput matrix, `auto_choice` runs the Trainer's own autotune
(components/trainer/autotune.py) on the model the Trainer builds and compiles, at the
bench's input shape and batch, on this machine's devices, and returns the cell it chose.
The runner then compares that cell's throughput with the fastest cell measured in the
same bench run (`auto_check_rows`).

Example:

    choice = auto_choice("seed_cnn", (64, 64, 1), 32, 10)
    auto_check_rows(results["throughput"], {"seed_cnn": choice})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _cell_label(precision: str, xla: bool) -> str:
    return f"{precision} xla {'on' if xla else 'off'}"


def auto_choice(model_name: str, input_shape: Sequence[int], batch_size: int,
                num_classes: int) -> dict[str, Any]:
    """What `trainer.precision: auto`, `trainer.xla: auto`, `trainer.autotune: on` choose
    for this model here (no cache: measured now). Imports TensorFlow."""
    import keras
    import tensorflow as tf

    from benchmarks.measures.training import synthetic_batch
    from components.trainer import autotune
    from components.trainer import module as trainer_module
    from components.trainer.config import LossScaleSection
    from components.trainer.precision import static_auto_choice
    from models import model_task

    devices, policy, policy_reason, xla, xla_reason = static_auto_choice()
    strategy = tf.distribute.get_strategy()
    models: dict[Any, Any] = {}

    def build(cell: autotune.Cell, batch: int):
        keras.mixed_precision.set_dtype_policy(cell.precision)
        model = trainer_module.build_training_model(
            model_name, {}, tuple(input_shape), num_classes, cell.precision)
        trainer_module.compile_training_model(
            model, model_task(model_name), 1e-3, cell.precision, LossScaleSection(), 1,
            cell.xla)
        model.make_train_function()
        models[cell] = model
        return model

    def batches(cell: autotune.Cell, batch: int):
        data = synthetic_batch(models[cell], batch, num_classes)
        dataset = tf.data.Dataset.from_tensors(data).repeat()
        return iter(strategy.experimental_distribute_dataset(dataset))

    record = autotune.tune(autotune.TuningRequest(
        autotune="on", precision="auto", xla="auto", devices=devices,
        static=(policy, policy_reason, xla, xla_reason), identity={}, cache_dir="",
        build=build, batches=batches, batch_for=lambda precision: int(batch_size),
    ))
    keras.mixed_precision.set_dtype_policy("float32")
    choice = record.choice
    return {"model": model_name, "auto": _cell_label(choice.precision, choice.xla),
            "status": record.status, "reason": record.reason,
            "probe_seconds": record.probe_seconds, "table": [dict(r) for r in record.table]}


def auto_check_rows(throughput: Sequence[Mapping[str, Any]],
                    choices: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per model: `model`, `auto` (the cell auto chose), `fastest` (the fastest
    cell measured in the throughput matrix), `ratio` (auto's throughput over the
    fastest's; None when auto's cell was not measured there)."""
    rows = []
    for model, choice in choices.items():
        measured = {
            _cell_label(row["precision"], row["xla"]): row["samples_per_sec"]
            for row in throughput
            if row["model"] == model and row.get("status") == "ok" and row.get("samples_per_sec")
        }
        entry: dict[str, Any] = {"model": model, "auto": choice.get("auto"),
                                 "fastest": None, "ratio": None,
                                 "auto_status": choice.get("status"),
                                 "probe_seconds": choice.get("probe_seconds"),
                                 "error": choice.get("error")}
        if measured:
            fastest = max(measured, key=measured.get)
            entry["fastest"] = fastest
            if choice.get("auto") in measured:
                entry["ratio"] = measured[choice["auto"]] / measured[fastest]
        rows.append(entry)
    return rows
