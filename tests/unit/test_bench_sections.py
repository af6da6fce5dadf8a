"""The sections of mptfx bench (benchmarks/sections/) and of the lab (tools/lab/sections/):
the entries results.json gets and the tables and verdicts results.md shows, from section
results as the runner writes them; the parameters of every worker task; the verdict on
`auto` drawn from the choice the Trainer measured."""

from __future__ import annotations

import dataclasses
import json
import types
import typing

import pytest

from benchmarks import report, sections
from benchmarks.measures.autocheck import auto_check_rows
from benchmarks.plan import SECTIONS
from benchmarks.sections.data_scale import summarise
from benchmarks.sections.tasks import from_json, to_json
from tools.lab import sections as lab_sections


def _cell(model, precision, xla, rate, status="ok"):
    return {"model": model, "precision": precision, "xla": xla, "status": status,
            "samples_per_sec": rate}


THROUGHPUT = [
    _cell("seed_cnn", "float32", False, 1000.0),
    _cell("seed_cnn", "mixed_bfloat16", False, 1200.0),
    _cell("seed_cnn", "float32", True, 400.0),
    _cell("resnet50", "float32", False, 50.0),
    _cell("resnet50", "mixed_bfloat16", False, 48.0),
    _cell("resnet50", "float32", True, None, status="skipped"),
]


def test_auto_check_has_one_entry_per_model_with_auto_fastest_and_ratio():
    rows = auto_check_rows(THROUGHPUT, {
        "seed_cnn": {"auto": "mixed_bfloat16 xla off", "status": "measured",
                     "probe_seconds": 3.0},
        "resnet50": {"auto": "mixed_bfloat16 xla off", "status": "measured"},
    })
    by_model = {row["model"]: row for row in rows}
    assert list(by_model) == ["seed_cnn", "resnet50"]
    assert by_model["seed_cnn"]["fastest"] == "mixed_bfloat16 xla off"
    assert by_model["seed_cnn"]["ratio"] == pytest.approx(1.0)
    assert by_model["resnet50"]["fastest"] == "float32 xla off"
    assert by_model["resnet50"]["ratio"] == pytest.approx(48 / 50)
    assert {"model", "auto", "fastest", "ratio"} <= set(rows[0])


def test_a_model_whose_auto_cell_was_not_measured_has_no_ratio():
    (row,) = auto_check_rows(THROUGHPUT, {"resnet50": {"auto": "float32 xla on",
                                                       "status": "measured"}})
    assert row["fastest"] == "float32 xla off" and row["ratio"] is None


def test_results_md_shows_the_auto_check_and_the_lab_s_stock_tfx_comparison():
    results = {
        "auto_check": auto_check_rows(THROUGHPUT, {"seed_cnn": {
            "auto": "float32 xla off", "status": "one candidate"}}),
        "stock_tfx": {"status": "ok", "mptfx_run_seconds": 50.0, "stock_tfx_seconds": 80.0,
                      "ratio": 50 / 80, "components": ["ImportExampleGen", "Pusher"]},
    }
    assert "| seed_cnn | float32 xla off | one candidate | mixed_bfloat16 xla off | 0.83× |" \
        in report.render_markdown(results)
    markdown = report.render_markdown(results, lab_sections.SECTIONS)
    assert "| stock TFX (ImportExampleGen, Pusher) | 80.0 |" in markdown
    assert "ratio (mptfx / stock): 0.62" in markdown


# --- every section: a module with a table and verdicts; every task's parameters ----------

def _row(model="seed_cnn", precision="float32", xla=False, rate=600.0, **extra):
    return {"model": model, "precision": precision, "xla": xla, "status": "ok",
            "batch_size": 32, "input_shape": [64, 64, 1], "unit": "images", "error": None,
            "samples_per_sec": rate, "step_ms": 32000 / rate, "peak_memory_mb": 900.0,
            "training_memory_mb": 200.0, "memory_kind": "peak RSS",
            "achieved_gflops": rate * 0.13, "ceiling_gflops": 200.0,
            "mfu": rate * 0.13 / 200.0, **extra}


HOST = {"device": "CPU", "cpu": {"model_name": "Test CPU", "logical_cpus": 2, "flags": []},
        "devices": [{"kind": "CPU", "name": "/physical_device:CPU:0"}],
        "auto": {"precision": "float32", "precision_reason": "CPU", "xla": False,
                 "xla_reason": "CPU"}}
RUNS = [{"images_per_sec_per_epoch": [900.0, 2000.0, 2100.0]}]


def _ingest(rate, rss=500.0, cores=2):
    return {"images": 100, "images_per_sec": rate, "photo_bytes": 1000, "bytes_written": 1010,
            "shards": 2, "reencoded": 0, "cores": cores, "peak_rss_mb": rss}


DATA_SCALE = summarise(100, {
    "mptfx": _ingest(200.0), "plain": _ingest(250.0),
    "mptfx_large_1core": _ingest(100.0, cores=1), "plain_large_1core": _ingest(130.0, cores=1),
    "mptfx_large": _ingest(200.0, rss=550.0), "plain_large": _ingest(250.0, rss=510.0)},
    {"batch_size": 64, "cores": 2, "mptfx_images_per_sec": 900.0,
     "plain_images_per_sec": 1000.0})
# One results entry per section of plan.SECTIONS and of the lab, the heading its table must
# show and a phrase of its verdicts (None: the section has no verdicts).
SAMPLES = {
    "throughput": ({"throughput": [_row(), _row(precision="mixed_bfloat16", rate=900.0)]},
                   "### Training throughput", "fastest cell is mixed_bfloat16 with XLA off"),
    "auto_check": ({"auto_check": auto_check_rows(THROUGHPUT, {"seed_cnn": {
        "auto": "float32 xla off", "status": "measured"}})},
        "### auto check", "seed_cnn: `auto` (measured) chooses float32 xla off, which runs at "
                          "0.83× the fastest cell (mixed_bfloat16 xla off)."),
    "mfu": ({"mfu": [_row(), _row(precision="mixed_bfloat16", rate=900.0)],
             "ceilings": {"float32": {"gflops": 200.0, "size": 2048}}},
            "### MFU", "MFU target (60% of the matmul ceiling) does NOT hold for seed_cnn"),
    "largest_batch": ({"largest_batch": {"memory_cap_mb": 2048.0, "rows": [
        {"model": "seed_cnn", "precision": "float32", "input_shape": [64, 64, 1],
         "largest": 288, "first_failure": 304, "probes": [[288, True]],
         "peak_memory_mb_at_largest": 864.0},
        {"model": "seed_cnn", "precision": "mixed_float16", "skipped": "too slow"}]}},
        "### Largest batch (peak RSS ≤ 2048 MB", None),
    "input_pipeline": ({"input_pipeline": {"status": "ok", "rows": [{
        "model": "seed_cnn", "input_size": [16, 16], "batch_size": 32, "precision": "float32",
        "delivered_images_per_sec": 1000.0, "delivered_cached_images_per_sec": 9000.0,
        "consumed_images_per_sec": 2000.0, "ratio": 0.5, "cached_ratio": 4.5}]}},
        "### Input pipeline", "Input pipeline at 16×16: decoding every epoch it delivers 0.50×"),
    "system_metrics": ({"system_metrics": {
        "status": "ok", "model": "seed_cnn", "input_size": [16, 16], "batch_size": 32,
        "precision": "float32", "xla": False, "rounds": 5, "window_seconds": 8.0,
        "sampling_interval": 2.0, "steps": 900, "samples": 20,
        "spread": 0.03,
        "rows": [{"mode": mode, "images_per_sec": rate, "window_rates": [rate], "ratio": ratio,
                  "images_per_cpu_second": rate / 2, "cpu_ratio": ratio}
                 for mode, rate, ratio in (("plain", 2020.0, 1.01), ("input meter", 2000.0, 1.0),
                                           ("input meter + system metrics", 1990.0, 0.995))],
        "system_metrics_ratio": 0.995, "system_metrics_cpu_ratio": 0.99,
        "input_meter_ratio": 0.99, "input_meter_cpu_ratio": 0.98}},
        "### System metrics and the input meter (seed_cnn 16×16",
        "runs at 0.995× the speed without (target ≥ 0.97): PASS"),
    "data_scale": ({"data_scale": DATA_SCALE}, "### Data scale (1,000 synthetic 224×224",
                   "Trainer input ÷ plain tf.data input 0.90 (target ≥ 0.9): PASS"),
    "photo_quality": ({"photo_quality": {
        "status": "ok", "photos": 2000, "test_photos": 1000,
        "mptfx": {"test_accuracy": 0.99, "eval_accuracy": 0.988, "seconds": 180.0,
                  "model": "photo_cnn", "input_size": [64, 64], "model_reason": "auto: photos",
                  "input_size_reason": "auto: 224 px", "precision": "mixed_bfloat16",
                  "epochs": 15, "command": "mptfx run --data /photos --workspace /ws --json"},
        "tutorial": {"test_accuracy": 0.979, "val_accuracy": 0.9675, "seconds": 202.0,
                     "input_size": [180, 180]}}},
        "### Photo quality (2,000 JPEG photos of 224×224 in 8 classes",
        "Photo quality: held-out accuracy 0.9900 (mptfx default) vs 0.9790 (tutorial) "
        "(target: at least the tutorial's): PASS."),
    "distillation": ({"distillation": {
        "status": "ok", "epochs": 15, "seeds": [1, 2, 3],
        "teacher": {"eval_accuracy": 0.97, "seconds": 300.0, "trainer_seconds": 200.0},
        "alone": [{"seed": s, "eval_accuracy": a, "seconds": 90.0, "trainer_seconds": 30.0}
                  for s, a in ((1, 0.98), (2, 0.975), (3, 0.97))],
        "distilled": [{"seed": s, "eval_accuracy": a, "seconds": 95.0, "trainer_seconds": 35.0,
                       "distill": {"teacher_parameters": 23_500_000,
                                   "student_parameters": 151_306}}
                      for s, a in ((1, 0.985), (2, 0.98), (3, 0.975))]}},
        "### Distillation (the digits: a resnet50 champion at 64×64, seed_cnn alone vs distilled",
        "Distillation: distilled seed_cnn 0.9800 vs alone 0.9750 (mean eval accuracy over 3 "
        "seed(s)) (target: at least alone): PASS."),
    "predict": ({"predict": {
        "status": "ok", "photos": 2000, "photo_bytes": 2**25, "rows": 2000, "errors": 0,
        "model": "seed_cnn", "input_size": [64, 64], "batch_size": 64, "cores": 2,
        "rounds": {"ours": [900.0, 950.0, 1000.0], "plain": [800.0, 850.0, 900.0]},
        "ours_images_per_sec": 950.0, "plain_images_per_sec": 850.0, "ratio": 950 / 850,
        "agreement": 1.0, "disagreements": [], "load_average": [0.5, 1.5]}},
        "### Predict (2,000 synthetic 224×224 JPEG photos, 32.0 MB; seed_cnn at 64×64",
        "Predict: photos given `serving_default`'s class 2,000 of 2,000 (target every one): "
        "PASS."),
    "overhead": ({"overhead": {
        "status": "ok", "model": "seed_cnn", "input_size": [16, 16], "batch_size": 32,
        "precision": "float32", "xla": False, "epochs": 4, "rounds": 1, "train_examples": 5748,
        "plain_fit_images_per_sec": 2000.0, "plain_fit_on_trainer_dataset_images_per_sec": 2000.0,
        "trainer_images_per_sec": 2000.0, "ratio": 1.0, "dataset_ratio": 1.0,
        "plain_runs": RUNS, "dataset_runs": RUNS, "trainer_runs": RUNS}},
        "### Trainer overhead", "Trainer/plain fit = 1.00 (as fast as plain fit or faster)"),
    "publication": ({"publication": {"status": "ok", "rows": [{
        "format": "TF Lite fp16", "variant": "fp16", "bytes": 512, "size_vs_tflite_fp32": 0.5,
        "latency_ms_p50": 0.02, "latency_ms_p99": 0.03, "throughput_images_per_sec": 2e4,
        "throughput_batch": 1, "threads": 1, "accuracy": 0.9, "agreement_with_savedmodel": 1.0,
        "input_size": [16, 16], "eval_images": 363}]}},
        "### Publication (16×16 input", "TF Lite fp16: 0.500× the fp32 size ≤ 0.52×."),
    "pipeline": ({"pipeline": {"command": "mptfx run --json", "status": "completed",
                               "seconds": 31.0, "wall_seconds": 30.0,
                               "components": {"Trainer": {"status": "completed",
                                                          "seconds": 20.0}}}},
                 "### Pipeline (`mptfx run --json`: completed, "
                 "31.0 s process, 30.0 s in the run)", None),
    "stock_tfx": ({"stock_tfx": {"status": "ok", "mptfx_run_seconds": 30.0,
                                 "stock_tfx_seconds": 60.0, "ratio": 0.5,
                                 "components": ["ImportExampleGen"]}},
                  "### Default `mptfx run` vs a stock TFX pipeline", None),
}


SUITES = {"benchmarks.sections": sections.BENCH, "tools.lab.sections": lab_sections.LAB}


@pytest.mark.parametrize("package,name", [(package, name) for package, suite in SUITES.items()
                                          for name in suite.names])
def test_every_section_has_a_module_with_its_table_and_verdicts(package, name):
    suite = SUITES[package]
    section = suite.sections[[s.name for s in suite.sections].index(name)]
    assert type(section).__module__ == f"{package}.{name}"
    entry, heading, verdict = SAMPLES[name]
    results = {"host": HOST, **entry}

    assert any(line.startswith(heading) for line in section.table(results))
    assert section.table({"host": HOST}) == []  # nothing of it in the results: no table
    assert heading in report.render_markdown(results, suite.sections)
    found = section.verdicts(results)
    if verdict is None:
        assert found == []
    else:
        assert any(verdict in line for line in found), found
        assert [line for line in report.verdicts(results, suite.sections)
                if line in found] == found


def test_the_bench_lists_exactly_plan_sections_and_holds_no_developer_instrument():
    names = [section.name for section in sections.SECTIONS]
    assert names[0] == "host" and sections.SECTIONS[0].required
    assert sections.BENCH.names == SECTIONS == tuple(names[1:])
    assert not set(SECTIONS) & set(lab_sections.LAB.names)


def test_the_lab_runs_the_bench_s_host_first_and_renders_the_profiled_mfu_cell():
    names = [section.name for section in lab_sections.SECTIONS]
    assert lab_sections.SECTIONS[0] is sections.SECTIONS[0]
    # The only other one renders the profiled MFU cell and runs nothing itself.
    assert set(names) - set(lab_sections.LAB.names) == {"host", "time_breakdown"}
    row = _row(kernels=[{"layer": "conv2", "pass": "weight gradient", "gflop": 0.5,
                         "ms": 5.0, "gflops": 100.0, "of_ceiling": 0.5}])
    markdown = report.render_markdown({"host": HOST, "mfu": [row], "ceilings": {}},
                                      lab_sections.SECTIONS)
    assert "### Why MFU is what it is: seed_cnn float32 XLA off" in markdown
    assert markdown.index("### MFU") < markdown.index("### Why MFU")
    assert "Host: Test CPU, 2 logical CPUs" in markdown


def test_the_verdict_on_auto_is_the_measured_choice_not_the_static_rule():
    # The run of issue 24: the static rule says mixed_bfloat16 (a CPU with AVX512_BF16),
    # the Trainer measured float32 fastest for resnet50 and the auto check said ratio 1.00.
    host = {**HOST, "auto": {"precision": "mixed_bfloat16", "precision_reason": "bf16 CPU",
                             "xla": False, "xla_reason": "CPU"}}
    throughput = [_row("resnet50", "float32", rate=50.0),
                  _row("resnet50", "mixed_bfloat16", rate=44.0)]
    rows = auto_check_rows(throughput, {"resnet50": {"auto": "float32 xla off",
                                                     "status": "measured"}})
    results = {"host": host, "throughput": throughput, "auto_check": rows}

    found = report.verdicts(results)
    markdown = report.render_markdown(results)
    assert "| resnet50 | float32 xla off | measured | float32 xla off | 1.00× |" in markdown
    assert "resnet50: `auto` (measured) chooses float32 xla off: the fastest cell." in found
    assert not [line for line in found if "chooses mixed_bfloat16" in line
                or "the fastest cell" in line and "0.88" in line], found
    # auto measured the slower cell: the verdict gives the table's ratio.
    rows = auto_check_rows(throughput, {"resnet50": {"auto": "mixed_bfloat16 xla off",
                                                     "status": "cached"}})
    (line,) = sections.auto_check.SECTION.verdicts({"auto_check": rows})
    assert line == ("resnet50: `auto` (cached) chooses mixed_bfloat16 xla off, which runs at "
                    "0.88× the fastest cell (float32 xla off).")


def _sample(hint):
    """A value of the type `hint` (str, int, float, bool, list, tuple, dict, dataclass)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(**{f.name: _sample(hints[f.name]) for f in dataclasses.fields(hint)})
    if origin is list:
        return [_sample(args[0]), _sample(args[0])]
    if origin is tuple:
        return (_sample(args[0]), _sample(args[0]))
    if origin is dict:
        return {"key": [1, 2]}
    if origin in (typing.Union, types.UnionType):
        return _sample(args[0])
    return {str: "text", int: 3, float: 1.5, bool: True}[hint]


ALL_TASKS = {**sections.TASKS, **lab_sections.TASKS}


@pytest.mark.parametrize("name", sorted(ALL_TASKS))
def test_a_task_s_params_reach_its_worker_as_they_were_sent(name):
    task = ALL_TASKS[name]
    assert task.name == name
    assert dataclasses.is_dataclass(task.params) and task.params.__dataclass_params__.frozen
    params = _sample(task.params)
    sent = json.loads(json.dumps(to_json(params)))  # what the worker reads
    assert from_json(task.params, sent) == params
    with pytest.raises(TypeError):
        from_json(task.params, {**sent, "unknown": 1})


@pytest.mark.parametrize("package", SUITES)
def test_every_task_has_its_own_name(package):
    suite = SUITES[package]
    tasks = [task for section in suite.sections for task in section.tasks]
    assert len({task.name for task in tasks}) == len(tasks)
    assert set(ALL_TASKS) >= {task.name for task in tasks}


def test_system_metrics_gives_no_verdict_when_the_load_moves_more_than_the_target():
    from benchmarks.sections.system_metrics import SECTION

    entry = json.loads(json.dumps(SAMPLES["system_metrics"][0]))
    entry["system_metrics"]["spread"] = 0.25
    [line] = SECTION.verdicts(entry)
    assert "no verdict: the reference windows spread 25 % (> 6 %)" in line
    assert "PASS" not in line and "FAIL" not in line
    assert "per CPU-second it trains 0.990× the images" in line
