"""Entry point of a benchmark task process: `python -m benchmarks.worker TASK PARAMS RESULT`.

Reads the JSON parameters from PARAMS, runs TASK and writes its JSON result to RESULT
(`{"error": ...}` when it raised; the traceback goes to the task's log). launch.run_task
starts it; nothing else should.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any


def _host(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.host import describe_host

    return describe_host(int(params["ceiling_repeats"]), tuple(params.get("dtypes", ())))


def _train_cell(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.training import CellSpec, run_cell

    return run_cell(CellSpec.from_dict(params))


def _batch_probe(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.training import probe_batch

    return probe_batch(
        params["model"],
        params["precision"],
        int(params["batch_size"]),
        params["input_shape"],
        int(params["num_classes"]),
    )


def _batch_ladder(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.training import probe_batch_ladder

    return probe_batch_ladder(
        params["model"],
        params["precision"],
        [int(b) for b in params["batches"]],
        params["input_shape"],
        int(params["num_classes"]),
        params["progress_path"],
    )


def _prepare_data(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.input_pipeline import prepare_data

    return prepare_data(params["data_dir"], int(params["replicate"]))


def _input_pipeline(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.input_pipeline import pipeline_vs_model
    from benchmarks.training import CellSpec
    from components.trainer.precision import (
        describe_devices,
        resolve_precision_policy,
        resolve_xla,
    )

    devices = describe_devices()
    policy, _ = resolve_precision_policy(params["precision"], devices)
    xla, _ = resolve_xla(params["xla"], devices)
    timing = CellSpec.from_dict(params["timing"])
    rows = pipeline_vs_model(
        params["data"],
        params["model"],
        params["input_sizes"],
        int(params["batch_size"]),
        policy,
        xla,
        timing,
        int(params["epochs"]),
    )
    return {"rows": rows}


def _ingest_compare(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.input_pipeline import ingest_vs_import_example_gen

    return ingest_vs_import_example_gen(params["data"], params["out_dir"])


def _trainer_overhead(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.overhead import trainer_vs_fit

    return trainer_vs_fit(
        params["data"],
        params["model"],
        params["input_size"],
        int(params["batch_size"]),
        params["precision"],
        params["xla"],
        int(params["epochs"]),
        params["work_dir"],
        int(params["rounds"]),
    )


def _publication(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.publication import compare_formats

    rows = compare_formats(
        params["data"],
        params["model"],
        params["input_size"],
        int(params["epochs"]),
        params["work_dir"],
        params["variants"],
        int(params["latency_runs"]),
        int(params["batch_size"]),
    )
    return {"rows": rows}


def _auto_choice(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.autocheck import auto_choice

    return auto_choice(params["model"], params["input_shape"], int(params["batch_size"]),
                       int(params["num_classes"]))


def _stock_tfx(params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.stock_tfx import run

    return run(params["examples_dir"], params["work_dir"], params["training"])


def _register_user_model(user_model: dict[str, str] | None) -> str | None:
    """`mptfx bench --model-file`: registers the file's builder in this task's process
    (the name is the same in every task: it derives from the file's content)."""
    if not user_model:
        return None
    from models.user_module import register_user_model

    return register_user_model(user_model["module_file"], user_model["builder"],
                               user_model["task"])


TASKS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "host": _host,
    "train_cell": _train_cell,
    "batch_probe": _batch_probe,
    "batch_ladder": _batch_ladder,
    "prepare_data": _prepare_data,
    "input_pipeline": _input_pipeline,
    "ingest_compare": _ingest_compare,
    "trainer_overhead": _trainer_overhead,
    "publication": _publication,
    "auto_choice": _auto_choice,
    "stock_tfx": _stock_tfx,
}


def _write_json(path: str, content: dict[str, Any]) -> None:
    staging = f"{path}.partial"
    with open(staging, "w") as f:
        json.dump(content, f, indent=2, default=str)
    os.replace(staging, path)


def main(argv: list[str]) -> int:
    """Runs one task; returns the process exit code (0 ok, 1 the task raised)."""
    task, params_path, result_path = argv
    with open(params_path) as f:
        params = json.load(f)
    try:
        user_model = _register_user_model(params.pop("user_model", None))
        result = TASKS[task](params)
        if user_model:
            result["user_model"] = user_model
    except Exception as error:  # reported to the parent as a failed task, traceback in the log
        traceback.print_exc()
        lines = str(error).strip().splitlines()
        first_line = lines[0] if lines else ""
        _write_json(result_path, {"error": f"{type(error).__name__}: {first_line}"})
        return 1
    _write_json(result_path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
