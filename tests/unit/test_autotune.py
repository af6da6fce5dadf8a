"""Measured `auto` (components/trainer/autotune.py): which cells are measured for which
devices, the choice of the fastest safe cell, the decision cache, and a real Trainer run
that measures on this CPU and then reuses its decision.

Other machines are described through `DeviceDescription` lists as in test_precision.py.
Where a GPU would run the timed steps, `_TimedModel` stands in for the model on the GPU (a
train function that advances an injected clock by the step time the test gives the cell):
it is the test double at the GPU boundary, not the thing under test (the selection,
safety rules and cache are real)."""

from __future__ import annotations

import json
import math
import os

import keras
import pytest

from components.trainer import autotune, module
from components.trainer import runtime as runtime_step
from components.trainer import tuning as tuning_step
from components.trainer.autotune import Cell, MeasureSettings, TuningRequest
from components.trainer.precision import DeviceDescription
from components.trainer.tuning_record import CellChoice
from tests.trainer_testdata import fn_args_dict, write_digits_examples

CPU = DeviceDescription("CPU", "/physical_device:CPU:0")
CPU_BF16 = DeviceDescription("CPU", "/physical_device:CPU:0",
                             cpu_features=frozenset({"avx512_bf16"}))
TPU = DeviceDescription("TPU", "/physical_device:TPU:0")


def _gpu(major: int, minor: int, index: int = 0) -> DeviceDescription:
    return DeviceDescription("GPU", f"/physical_device:GPU:{index}", (major, minor))


@pytest.mark.parametrize("devices, precision, xla, expected", [
    ([CPU], "auto", "auto", ["float32 xla off"]),
    ([CPU_BF16], "auto", "auto", ["float32 xla off", "mixed_bfloat16 xla off"]),
    ([CPU_BF16], "float32", "auto", ["float32 xla off"]),
    ([CPU, _gpu(7, 5)], "auto", "auto", ["mixed_float16 xla off", "mixed_float16 xla on"]),
    ([CPU, _gpu(8, 6)], "auto", "auto", [
        "mixed_float16 xla off", "mixed_float16 xla on",
        "mixed_bfloat16 xla off", "mixed_bfloat16 xla on"]),
    # One Volta among Amperes: no bfloat16 tensor cores on every replica.
    ([CPU, _gpu(8, 0), _gpu(7, 0, 1)], "auto", "auto",
     ["mixed_float16 xla off", "mixed_float16 xla on"]),
    ([CPU, _gpu(6, 1)], "auto", "auto", ["float32 xla off", "float32 xla on"]),
    ([CPU, _gpu(8, 0)], "auto", "off", ["mixed_float16 xla off", "mixed_bfloat16 xla off"]),
    ([CPU, _gpu(8, 0)], "float32", "on", ["float32 xla on"]),
    ([CPU, TPU], "auto", "auto", ["mixed_bfloat16 xla on"]),
])
def test_only_plausible_cells_are_measured(devices, precision, xla, expected):
    assert [c.label for c in autotune.candidate_cells(precision, xla, devices)] == expected


class _TimedModel:
    """Stands in for a model training on a GPU: each step takes `step_seconds` on `clock`."""

    def __init__(self, clock: list[float], step_seconds: float, loss: float = 1.0,
                 loss_scaled: bool = True) -> None:
        self.clock, self.step_seconds, self.loss = clock, step_seconds, loss
        self.optimizer = (keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())
                          if loss_scaled else keras.optimizers.Adam())

    def train_function(self, iterator):
        next(iterator)
        self.clock[0] += self.step_seconds
        return {"loss": self.loss}


def _request(tmp_path, models: dict[str, dict], builds: list[str], **overrides
             ) -> tuple[TuningRequest, list[float]]:
    clock = [0.0]

    def build(cell: Cell, batch: int):
        builds.append(cell.label)
        return _TimedModel(clock, **models[cell.label])

    fields = dict(
        autotune="on", precision="auto", xla="auto", devices=[CPU, _gpu(8, 0)],
        static=("mixed_float16", "GPU: static rule", True, "GPU: XLA on"),
        identity={"model": "seed_cnn", "input_shape": (16, 16, 1), "batch_size": 32},
        cache_dir=str(tmp_path / "autotune"), build=build,
        batches=lambda cell, batch: iter(int, 1), batch_for=lambda precision: 32,
        settings=MeasureSettings(warmup_steps=2, window_seconds=0.05, windows=3),
    )
    fields.update(overrides)
    return TuningRequest(**fields), clock


GPU_STEPS = {
    "mixed_float16 xla off": {"step_seconds": 0.010},
    "mixed_float16 xla on": {"step_seconds": 0.008},
    "mixed_bfloat16 xla off": {"step_seconds": 0.009},
    "mixed_bfloat16 xla on": {"step_seconds": 0.005},
}


def test_the_fastest_cell_is_chosen_and_a_second_run_pays_nothing(tmp_path):
    builds: list[str] = []
    request, clock = _request(tmp_path, GPU_STEPS, builds)
    first = autotune.tune(request, clock=lambda: clock[0])
    assert first.status == "measured"
    assert first.choice == CellChoice("mixed_bfloat16", True, 32)
    rates = {Cell(r["precision"], r["xla"]).label: r["images_per_sec"] for r in first.table}
    assert rates["mixed_bfloat16 xla on"] == pytest.approx(32 / 0.005)
    assert rates["mixed_float16 xla off"] == pytest.approx(32 / 0.010)
    assert "mixed_bfloat16 xla on measured fastest" in first.reason
    assert "2.00x mixed_float16 xla off" in first.reason
    assert first.probe_seconds > 0 and os.path.exists(first.cache_file)
    assert len(builds) == 4

    builds.clear()
    second = autotune.tune(request, clock=lambda: clock[0])
    assert second.status == "cached" and builds == []
    assert second.choice == first.choice and second.probe_seconds == 0
    assert second.reason.endswith("[cached]")


def test_another_batch_or_device_is_measured_again(tmp_path):
    builds: list[str] = []
    request, clock = _request(tmp_path, GPU_STEPS, builds)
    autotune.tune(request, clock=lambda: clock[0])
    other_batch, _ = _request(tmp_path, GPU_STEPS, builds,
                              identity={**request.identity, "batch_size": 64})
    other_gpu, _ = _request(tmp_path, GPU_STEPS, builds, devices=[CPU, _gpu(9, 0)])
    builds.clear()
    assert autotune.tune(other_batch, clock=lambda: clock[0]).status == "measured"
    assert autotune.tune(other_gpu, clock=lambda: clock[0]).status == "measured"
    assert len(builds) == 8


def test_float16_without_loss_scaling_or_with_a_nan_loss_is_never_chosen(tmp_path):
    steps = {
        **GPU_STEPS,
        "mixed_float16 xla on": {"step_seconds": 0.001, "loss_scaled": False},
        "mixed_bfloat16 xla on": {"step_seconds": 0.001, "loss": math.nan},
    }
    request, clock = _request(tmp_path, steps, [])
    record = autotune.tune(request, clock=lambda: clock[0])
    assert record.choice.precision == "mixed_bfloat16"
    assert record.choice.xla is False  # 0.009 s beats 0.010 s; the 0.001 s are unsafe
    notes = {Cell(r["precision"], r["xla"]).label: r for r in record.table}
    assert not notes["mixed_float16 xla on"]["safe"]
    assert "without loss scaling" in notes["mixed_float16 xla on"]["note"]
    assert "non-finite loss" in notes["mixed_bfloat16 xla on"]["note"]


def test_off_one_candidate_and_multi_worker_keep_the_static_rules(tmp_path):
    builds: list[str] = []
    for overrides, status in (({"autotune": "off"}, "off"),
                              ({"precision": "float32", "xla": "on"}, "one candidate"),
                              ({"measure": False}, "static (multi-worker)")):
        request, clock = _request(tmp_path, GPU_STEPS, builds, **overrides)
        record = autotune.tune(request, clock=lambda clock=clock: clock[0])
        assert record.status == status
        assert record.choice == CellChoice("mixed_float16", True, 32)
        assert record.reason == "GPU: static rule"
    assert builds == []


def test_no_safe_cell_names_each_cells_problem(tmp_path):
    steps = {label: {"step_seconds": 0.01, "loss": math.inf} for label in GPU_STEPS}
    request, clock = _request(tmp_path, steps, [])
    with pytest.raises(ValueError, match="no cell trained safely.*mixed_float16 xla off: "
                                         "ValueError: non-finite loss"):
        autotune.tune(request, clock=lambda: clock[0])


def test_a_corrupt_cache_file_is_measured_again(tmp_path):
    request, clock = _request(tmp_path, GPU_STEPS, [])
    first = autotune.tune(request, clock=lambda: clock[0])
    with open(first.cache_file, "w") as f:
        f.write('{"choice": ')
    assert autotune.tune(request, clock=lambda: clock[0]).status == "measured"
    with open(first.cache_file) as f:
        assert json.load(f)["choice"] == first.choice.to_dict()


# --- the real Trainer on this CPU, described as one with bfloat16 instructions ---------


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory) -> str:
    return write_digits_examples(str(tmp_path_factory.mktemp("digits")), 160)


def test_the_trainer_measures_on_this_cpu_then_reuses_the_decision(
        examples_uri, tmp_path, monkeypatch):
    """Float32 and mixed_bfloat16 both train for real here (bfloat16 is emulated on a CPU
    without AVX512_BF16, which is what the described CPU claims to have)."""
    from tfx.components.trainer.fn_args_utils import FnArgs

    # The resolve step reads the devices twice: the static rules, then the probe's cells.
    monkeypatch.setattr(runtime_step, "describe_devices", lambda: [CPU_BF16])
    monkeypatch.setattr(tuning_step, "describe_devices", lambda: [CPU_BF16])
    cache_dir = str(tmp_path / "autotune")

    def run(name: str) -> dict:
        args = fn_args_dict(examples_uri, str(tmp_path / name), precision="auto", epochs=1,
                            autotune_cache_dir=cache_dir)
        return module.train_and_export(FnArgs(**args)).summary.to_dict()

    first = run("first")
    tuning = first["autotune"]
    assert tuning["status"] == "measured"
    table = {r["precision"]: r for r in tuning["table"]}
    assert set(table) == {"float32", "mixed_bfloat16"}
    assert all(r["safe"] and r["images_per_sec"] > 0 for r in table.values())
    fastest = max(table, key=lambda p: table[p]["images_per_sec"])
    assert first["precision"] == fastest and first["xla"] is False
    assert first["precision_reason"].startswith(f"autotune: {fastest} xla off measured fastest")
    assert first["autotune_probe_seconds"] > 0
    assert tuning["trained_probe_model"]  # the winner's traced model trains on: no 2nd trace
    assert os.listdir(cache_dir) == [os.path.basename(tuning["cache_file"])]

    second = run("second")
    assert second["autotune"]["status"] == "cached"
    assert second["precision"] == first["precision"]
    assert second["autotune_probe_seconds"] < first["autotune_probe_seconds"]
    assert keras.mixed_precision.global_policy().name == "float32"  # restored


def test_mlflow_gets_the_measured_table_and_the_probe_cost():
    from components.run_summary import RunSummary
    from components.tracking import content

    trainer = {"precision": "float32", "batch_size_reason": "requested", "autotune": {
        "status": "measured", "candidates": ["float32 xla off", "mixed_bfloat16 xla off"],
        "probe_seconds": 2.5, "table": [
            {"precision": "float32", "xla": False, "images_per_sec": 900.0},
            {"precision": "mixed_bfloat16", "xla": False, "images_per_sec": None}]}}
    summary = RunSummary.parse({"status": "completed", "run_id": "r1",
                                "summary_path": "summary.json", "trainer": trainer})
    params = content.run_params(summary, {})
    assert params["autotune"] == "measured"
    assert params["autotune_candidates"] == "float32 xla off, mixed_bfloat16 xla off"
    metrics = content.final_metrics(summary, {})
    assert metrics["autotune/probe_seconds"] == 2.5
    assert metrics["autotune/float32_xla_off_images_per_sec"] == 900.0
    assert "autotune/mixed_bfloat16_xla_off_images_per_sec" not in metrics  # unsafe cell
