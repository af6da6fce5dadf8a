"""docs/PERFORMANCE.md is generated from a run's results.json (benchmarks/performance.py):
the command, the date, the machine and its CPU flags, then the run's tables and verdicts."""

from __future__ import annotations

import json

from benchmarks import performance
from benchmarks.measures.autocheck import auto_check_rows

ROW = {"model": "seed_cnn", "precision": "float32", "xla": False, "status": "ok",
       "batch_size": 32, "input_shape": [64, 64, 1], "unit": "images", "error": None,
       "samples_per_sec": 640.0, "step_ms": 50.0, "peak_memory_mb": 900.0,
       "training_memory_mb": 200.0, "memory_kind": "peak RSS", "speedup": 1.0}
RESULTS = {
    "command": "mptfx bench --quick --write-docs docs/PERFORMANCE.md",
    "started": "2026-12-03T12:00:00", "seconds": 412.0,
    "load_average_start": [1.5, 1.0, 1.0], "load_average_end": [2.25, 1.0, 1.0],
    "host": {"device": "CPU", "tensorflow": "2.16.2", "keras": "3.6.0",
             "cpu": {"model_name": "Intel Xeon Test", "logical_cpus": 2,
                     "flags": ["avx2", "avx512_bf16"]},
             "devices": [{"kind": "CPU", "name": "/physical_device:CPU:0"}],
             "auto": {"precision": "mixed_bfloat16", "precision_reason": "bf16 CPU",
                      "xla": False, "xla_reason": "CPU"}},
    "throughput": [ROW],
    "auto_check": auto_check_rows([ROW], {"seed_cnn": {"auto": "float32 xla off",
                                                       "status": "measured"}}),
    "failures": [],
}


def test_the_page_is_written_from_results_json(tmp_path):
    source = tmp_path / "results.json"
    source.write_text(json.dumps(RESULTS))
    page = tmp_path / "docs" / "PERFORMANCE.md"

    assert performance.main([str(source), str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Performance on the machine it was measured on\n")
    assert "Generated from results.json" in text and "Do not edit" in text
    assert "- Command: `mptfx bench --quick --write-docs docs/PERFORMANCE.md`" in text
    assert "- Date: 2026-12-03T12:00:00 (412 s)" in text
    assert ("- Machine: Intel Xeon Test, 2 logical CPUs, CPU flags avx2, avx512_bf16; "
            "devices: /physical_device:CPU:0; TensorFlow 2.16.2, Keras 3.6.0") in text
    assert "- Load average (1 min): 1.50 at start, 2.25 at end (on 2 logical CPUs)" in text
    assert "| seed_cnn | 64×64×1 | 32 | float32 | off | 640.0 images/s |" in text
    assert "seed_cnn: `auto` (measured) chooses float32 xla off: the fastest cell." in text
    assert text == performance.render_page(RESULTS)  # the same page from the same run


def test_an_unreadable_results_json_is_one_line_naming_the_file(tmp_path, capsys):
    source = tmp_path / "results.json"
    source.write_text("{not json")
    assert performance.main([str(source), str(tmp_path / "PERFORMANCE.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{source}: not a readable results.json")
    assert not (tmp_path / "PERFORMANCE.md").exists()


def test_several_runs_share_one_page_each_under_its_own_command_and_date(tmp_path):
    quick = {**RESULTS, "sections": ["host", "throughput", "auto_check"]}
    scale = {**RESULTS, "command": "mptfx bench --sections data_scale",
             "started": "2026-12-03T18:44:51", "seconds": 600.0, "sections": ["host", "data_scale"],
             "throughput": []}
    sources = []
    for name, run in (("quick", quick), ("scale", scale)):
        sources.append(tmp_path / f"{name}.json")
        sources[-1].write_text(json.dumps(run))
    page = tmp_path / "PERFORMANCE.md"

    assert performance.main([*map(str, sources), str(page)]) == 0
    text = page.read_text()
    first, second = text.split("## Run 2: host, data_scale\n")
    assert "## Run 1: host, throughput, auto_check" in first
    assert "- Command: `mptfx bench --quick --write-docs docs/PERFORMANCE.md`" in first
    assert "| seed_cnn | 64×64×1 | 32 | float32 | off | 640.0 images/s |" in first
    assert "- Command: `mptfx bench --sections data_scale`" in second
    assert "- Date: 2026-12-03T18:44:51 (600 s)" in second
    assert "640.0 images/s" not in second
