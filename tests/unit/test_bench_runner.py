"""`run_bench` over every section of mptfx bench and of the lab (tools/lab), with the worker
processes and `mptfx run` replaced by canned results: what each section sends its tasks,
the console, results.json, results.md and the generated performance page, the --quick
budget and the exit codes. No subprocess, no TensorFlow."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
from pathlib import Path

import pytest

from benchmarks import charts, sections
from benchmarks.launch import TaskOutcome
from benchmarks.options import BenchOptions
from benchmarks.plan import SECTIONS
from benchmarks.runner import run_bench
from benchmarks.sections import context
from tools.lab import sections as lab_sections
from tools.lab.sections import LAB

HOST = {"device": "CPU", "cpu": {"model_name": "Test CPU", "logical_cpus": 2, "flags": []},
        "devices": [], "models": ["seed_cnn", "resnet50"],
        "auto": {"precision": "float32", "precision_reason": "CPU", "xla": False,
                 "xla_reason": "CPU"}}
CELL = {"samples_per_sec": 600.0, "step_ms": 50.0, "peak_memory_mb": 900.0,
        "memory_kind": "peak RSS", "achieved_gflops": 60.0, "ceiling_gflops": 200.0,
        "mfu": 0.3}
INPUT_ROW = {"model": "seed_cnn", "input_size": [16, 16], "batch_size": 32,
             "precision": "float32", "delivered_images_per_sec": 1000.0,
             "delivered_cached_images_per_sec": 9000.0, "consumed_images_per_sec": 2000.0,
             "ratio": 0.5, "cached_ratio": 4.5}
RUNS = [{"images_per_sec_per_epoch": [900.0, 2000.0, 2100.0]}]


def _result(task: str, params: dict) -> dict | None:
    """What each worker task returns, as small as the sections' tables allow."""
    if task == "batch_ladder":
        with open(params["progress_path"], "w") as progress:
            for batch in params["batches"]:
                progress.write(json.dumps({"batch": batch, "fits": batch <= 64,
                                           "peak_memory_mb": 10.0}) + "\n")
    return {
        "host": HOST,
        "train_cell": CELL,
        "ceilings": {"float32": {"gflops": 200.0, "size": 2048}},
        "mfu_cell": CELL,
        "auto_choice": {"auto": "float32 xla off", "status": "measured"},
        "batch_ladder": {},
        "batch_probe": {"fits": params.get("batch_size", 0) <= 80, "peak_memory_mb": 20.0},
        "prepare_data": {"replicate": 4, "replicated": {}, "examples_dir": "/digits"},
        "input_pipeline": {"rows": [INPUT_ROW]},
        "ingest_compare": {"records": 10, "files": 1, "ours_seconds": 1.0,
                           "ours_records_per_sec": 10.0, "ours_written": 10,
                           "ours_quarantined": 0, "import_example_gen_seconds": 2.0,
                           "import_example_gen_records_per_sec": 5.0,
                           "import_example_gen_written": 10},
        "data_scale_photos": {"sets": [{"root": "/photos-n", "photos": 10, "bytes": 100},
                                       {"root": "/photos-4n", "photos": 40, "bytes": 400}]},
        "data_scale_ingest": {"method": params.get("method"), "examples_dir": "/ex",
                              "images": 10, "seconds": 1.0,
                              "images_per_sec": 10.0, "photo_bytes": 100,
                              "bytes_written": 101, "shards": 2, "reencoded": 0, "cores": 2,
                              "peak_rss_mb": 500.0},
        "data_scale_input": {"input_size": [224, 224], "batch_size": 64, "cores": 2,
                             "mptfx_images_per_sec": 900.0, "plain_images_per_sec": 1000.0},
        "predict": {"status": "ok", "photo_bytes": 100, "photos": 10, "rows": 10, "errors": 0,
                    "model": "seed_cnn", "input_size": [64, 64], "batch_size": 64,
                    "cores": 2, "rounds": {"ours": [900.0], "plain": [1000.0]},
                    "ours_images_per_sec": 900.0, "plain_images_per_sec": 1000.0,
                    "ratio": 0.9, "agreement": 1.0, "disagreements": []},
        "trainer_overhead": {"model": "seed_cnn", "input_size": [16, 16], "batch_size": 32,
                             "precision": "float32", "xla": False, "epochs": 4, "rounds": 1,
                             "train_examples": 100, "plain_fit_images_per_sec": 2000.0,
                             "plain_fit_on_trainer_dataset_images_per_sec": 2000.0,
                             "trainer_images_per_sec": 2000.0, "ratio": 1.0,
                             "dataset_ratio": 1.0, "plain_runs": RUNS, "dataset_runs": RUNS,
                             "trainer_runs": RUNS},
        "publication": {"rows": [{"format": "TF Lite fp32", "variant": "fp32", "bytes": 1024,
                                  "size_vs_tflite_fp32": 1.0, "latency_ms_p50": 0.02,
                                  "latency_ms_p99": 0.03, "throughput_images_per_sec": 1e4,
                                  "throughput_batch": 1, "threads": 1, "accuracy": 0.9,
                                  "agreement_with_savedmodel": 1.0, "input_size": [16, 16],
                                  "eval_images": 363}]},
        "stock_tfx": {"pushed_versions": [1]},
        "photo_quality_sets": {"train": {"root": "/photos", "photos": 80},
                               "test": {"root": "/test", "photos": 40}},
        "photo_quality_tutorial": PHOTO_RUN,
        "photo_quality_mptfx": PHOTO_RUN,
        "distillation_teacher": {**PHOTO_RUN, "pushed": True},
        "distillation_student": {**PHOTO_RUN, "trainer_seconds": 5.0},
        "system_metrics": {"model": "seed_cnn", "input_size": [16, 16], "batch_size": 32,
                           "precision": "float32", "xla": False, "rounds": 5, "steps": 100,
                           "window_seconds": 8.0, "sampling_interval": 2.0, "samples": 4,
                           "spread": 0.02,
                           "rows": [{"mode": "input meter", "images_per_sec": 1000.0,
                                     "window_rates": [1000.0], "ratio": 1.0,
                                     "images_per_cpu_second": 500.0, "cpu_ratio": 1.0}],
                           "system_metrics_ratio": 1.0, "system_metrics_cpu_ratio": 1.0,
                           "input_meter_ratio": 1.0, "input_meter_cpu_ratio": 1.0},
    }[task]


PHOTO_RUN = {"test_accuracy": 0.9, "seconds": 10.0, "val_accuracy": 0.9,
             "eval_accuracy": 0.9, "input_size": [64, 64]}


@pytest.fixture
def bench(monkeypatch, tmp_path):
    """Runs `run_bench` with canned tasks; returns (exit code, console, results, calls)."""
    calls: list[tuple[str, dict]] = []
    clock = [0.0]
    monkeypatch.setattr(context.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(charts, "write_charts", lambda results, out_dir: [])

    def run_task(task, params, bench_dir, name, timeout_seconds, memory_cap_mb=None,
                 worker="benchmarks.worker"):
        calls.append((task, params))
        workers.add(worker)
        clock[0] += task_seconds
        (Path(bench_dir) / "logs").mkdir(parents=True, exist_ok=True)  # as run_task does
        log = str(Path(bench_dir) / "logs" / f"{name}.log")
        if task in failing:
            return TaskOutcome("failed", None, 1.0, f"{task} broke", log)
        return TaskOutcome("ok", _result(task, params), 1.0, None, log)

    def mptfx_run(command, **kwargs):
        clock[0] += 3.0
        summary = {"status": "completed", "run_id": "r1", "summary_path": "summary.json",
                   "wall_seconds": 3.0,
                   "components": {"Trainer": {"status": "completed", "seconds": 2.0}}}
        return subprocess.CompletedProcess(command, 0, json.dumps(summary), "")

    monkeypatch.setattr(context, "run_task", run_task)
    monkeypatch.setattr(subprocess, "run", mptfx_run)
    failing: set[str] = set()
    workers: set[str] = set()
    task_seconds = 1.0

    def run(fail=(), seconds=1.0, suite=sections.BENCH, write_docs=None, **options):
        nonlocal task_seconds
        failing.update(fail)
        task_seconds = seconds
        out = io.StringIO()
        options = {"workspace": str(tmp_path), "quick": False, "sections": suite.names,
                   "precisions": ("float32",), "xla": (False,), **options}
        code = run_bench(BenchOptions(**options), out, suite, write_docs)
        results = json.loads((tmp_path / "bench" / "results.json").read_text())
        assert workers <= {suite.worker}
        return code, out.getvalue(), results, calls

    return run


def _check_calls(calls, tasks):
    for task, params in calls:  # each parameter once, as its dataclass names it
        fields = {f.name for f in dataclasses.fields(tasks[task].params)}
        assert set(params) == fields | {"user_model"}
        assert params["user_model"]["module_file"] == "/models/mine.py"
    assert {task for task, _ in calls} == set(tasks)


def test_every_section_runs_and_sends_its_tasks_their_dataclass(bench, tmp_path):
    page = tmp_path / "docs" / "PERFORMANCE.md"
    code, console, results, calls = bench(model_file="/models/mine.py", write_docs=str(page))

    assert code == 0, console
    assert set(SECTIONS) <= set(results) and {"host", "data", "ingest"} <= set(results)
    assert 64 <= results["largest_batch"]["rows"][0]["largest"] <= 80  # probes fit to 80
    for heading in ("### Training throughput", "### auto check", "### Largest batch",
                    "### Input pipeline", "### Data scale", "### Predict", "### Verdicts"):
        assert heading in console  # the results.md it wrote, printed
    for instrument in ("MFU", "ceiling", "### Trainer overhead", "### Publication",
                       "### Pipeline", "stock TFX"):
        assert instrument not in console  # the lab's, not the product's
    _check_calls(calls, sections.TASKS)
    assert "### Training throughput" in page.read_text() and str(page) in console


def test_the_lab_runs_its_instruments_through_its_own_worker(bench):
    code, console, results, calls = bench(model_file="/models/mine.py", suite=LAB)

    assert code == 0, console
    assert set(LAB.names) <= set(results) and {"host", "ceilings"} <= set(results)
    assert results["pipeline"]["seconds"] == 3.0
    assert results["stock_tfx"]["ratio"] == pytest.approx(3.0)  # mptfx run 3 s, stock 1 s
    assert results["mfu"][0]["mfu"] == 0.3
    for heading in ("## mptfx lab", "### MFU", "### Trainer overhead", "### Publication",
                    "### Pipeline", "### Default `mptfx run` vs a stock TFX", "### Verdicts"):
        assert heading in console
    assert "MFU target (60% of the matmul ceiling) does NOT hold" in console
    _check_calls(calls, lab_sections.TASKS)


def test_a_failed_host_ends_the_run_with_exit_1(bench):
    code, console, results, calls = bench(fail={"host"})

    assert code == 1
    assert "  host failed: host broke" in console
    assert [task for task, _ in calls] == ["host"]
    assert "throughput" not in results and "verdicts" not in results


def test_a_failed_task_is_exit_1_and_named_and_a_section_left_without_data_is_named(bench):
    code, console, results, _ = bench(fail={"prepare_data", "auto_choice"})

    assert code == 1
    assert "  data failed: prepare_data broke" in console
    assert "FAILED auto-seed_cnn: auto_choice broke" in console
    assert "input_pipeline" not in results
    assert "FAILED section input_pipeline not run: what it needs was not measured" in console
    assert results["data_scale"]  # not a digits section: it ran


def test_quick_leaves_other_models_cells_out_so_the_sections_after_them_still_run(bench):
    code, console, results, calls = bench(quick=True, seconds=300.0,
                                          sections=("throughput", "auto_check"))

    assert code == 0, console
    seed, resnet = results["throughput"]
    assert seed["status"] == "ok" and resnet["status"] == "skipped"
    assert resnet["error"].startswith("--quick budget: left for the sections after this one")
    # auto_check ran, on the model the matrix measured only.
    assert [row["model"] for row in results["auto_check"]] == ["seed_cnn"]
    assert [task for task, _ in calls] == ["host", "train_cell", "auto_choice"]


def test_quick_runs_every_listed_section_also_past_its_budget(bench):
    code, console, results, calls = bench(quick=True, seconds=300.0,
                                          sections=("throughput", "auto_check", "data_scale"))

    assert code == 0, console
    assert {"throughput", "auto_check", "data_scale"} <= set(results)
    assert results["seconds"] > 780  # the budget sized the matrix; no section was dropped
    assert results["throughput"][1]["error"].startswith("--quick budget")
    assert "skipped_sections" not in results and "FAILED" not in console


def test_quick_searches_one_precision_s_batch_when_more_would_crowd_out_the_rest(bench):
    code, console, results, calls = bench(quick=True, seconds=100.0,
                                          precisions=("float32", "mixed_bfloat16"),
                                          sections=("largest_batch", "data_scale"))

    assert code == 0, console
    first, second = results["largest_batch"]["rows"]
    assert first["precision"] == "float32" and first["largest"] >= 64
    assert second["skipped"].startswith("--quick budget: left for the sections after this")
    assert "data_scale" in results
    assert [task for task, _ in calls][:3] == ["host", "batch_ladder", "batch_probe"]
