"""`mptfx bench`: runs every section in its own processes and writes table, JSON and charts.

This process never imports TensorFlow: each measurement runs in a fresh worker process
(benchmarks/launch.py), and every ratio compares numbers taken in this one run.

Outputs in `<workspace>/bench/`: `results.json` (everything, rewritten after every section,
so an interrupted run keeps what it measured), `results.md` (the tables),
`throughput.png`, `memory.png`, and `logs/` with each task's full output.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from benchmarks import charts, report
from benchmarks.autocheck import auto_check_rows
from benchmarks.launch import TaskOutcome, run_task
from benchmarks.options import BenchOptions
from benchmarks.plan import (
    COMPUTE_DTYPES,
    MIN_SPEEDUP_FOR_BATCH_SEARCH,
    REFERENCE_PRECISION,
    SECTION_SECONDS,
    SEED_MODEL,
    cell_skip_reason,
    model_setup,
)
from components.errors import UsageError
from components.trainer.batch_size import search_largest_batch

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
_UNSUPPORTED = "No OpKernel was registered"
DATA_SECTIONS = ("input_pipeline", "overhead", "publication", "stock_tfx")


class BenchRun:
    """One `mptfx bench` run: the sections in order, the results, the files."""

    def __init__(self, options: BenchOptions, out: TextIO) -> None:
        self.options = options
        self.preset = options.preset
        self.out = out
        self.bench_dir = Path(options.workspace).resolve() / "bench"
        self.failures: list[str] = []
        self.started = time.monotonic()
        self.results: dict[str, Any] = {
            "command": options.command,
            "quick": options.quick,
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "load_average_start": list(os.getloadavg()),
            "sections": list(options.sections),
        }
        self.device = "CPU"

    # -- plumbing ------------------------------------------------------------------------

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def task(
        self,
        task: str,
        params: dict[str, Any],
        name: str,
        timeout: float,
        memory_cap_mb: float | None = None,
    ) -> TaskOutcome:
        if self.options.model_file:
            params = {**params, "user_model": {"module_file": self.options.model_file,
                                               "builder": self.options.model_builder,
                                               "task": self.options.model_task}}
        outcome = run_task(task, params, self.bench_dir, name, timeout, memory_cap_mb)
        self.results.setdefault("task_seconds", {})[name] = round(outcome.seconds, 1)
        if outcome.status == "failed" and _UNSUPPORTED in (outcome.error or ""):
            # A fact about this platform (e.g. no float16 MaxPool3D kernel on CPUs), not a
            # defect of the benchmark: reported in the table, not a failed run.
            outcome.status = "unsupported"
        if outcome.status == "failed":
            self.failures.append(f"{name}: {outcome.error} (log: {outcome.log_path})")
        return outcome

    def save(self) -> None:
        self.results["seconds"] = round(time.monotonic() - self.started, 1)
        self.results["load_average_end"] = list(os.getloadavg())
        self.results["failures"] = self.failures
        self.bench_dir.mkdir(parents=True, exist_ok=True)
        path = self.bench_dir / RESULTS_JSON
        path.with_suffix(".partial").write_text(json.dumps(self.results, indent=2, default=str))
        path.with_suffix(".partial").replace(path)

    # -- sections ------------------------------------------------------------------------

    def run(self) -> int:
        """Runs the selected sections; returns the exit code (1 if a task failed)."""
        self.bench_dir.mkdir(parents=True, exist_ok=True)
        for stale in (RESULTS_JSON, RESULTS_MD, charts.THROUGHPUT_PNG, charts.MEMORY_PNG):
            (self.bench_dir / stale).unlink(missing_ok=True)
        for folder in ("tasks", "logs"):
            shutil.rmtree(self.bench_dir / folder, ignore_errors=True)
        self.say(f"mptfx bench{' --quick' if self.options.quick else ''}: writing to "
                 f"{self.bench_dir} (load average {self._load()})")
        host = self.run_host()
        if host is None:
            self.save()
            return 1
        models = self.choose_models(host["models"], host.get("user_model"))
        if self.wanted("throughput"):
            self.run_throughput(models)
        if self.wanted("auto_check"):
            self.run_auto_check(models)
        if self.wanted("largest_batch"):
            self.run_largest_batch(models)
        data = None
        if any(self.wanted(s, announce=False) for s in DATA_SECTIONS):
            data = self.prepare_data()
        if data and self.wanted("input_pipeline"):
            self.run_input_pipeline(data)
        if data and self.wanted("overhead"):
            self.run_overhead(data)
        if data and self.wanted("publication"):
            self.run_publication(data)
        if self.wanted("pipeline"):
            self.run_pipeline()
        if data and self.wanted("stock_tfx"):
            self.run_stock_tfx(data)
        self.results["verdicts"] = report.verdicts(self.results)
        self.save()
        markdown = report.render_markdown(self.results)
        (self.bench_dir / RESULTS_MD).write_text(markdown)
        written = charts.write_charts(self.results, self.bench_dir)
        self.say("")
        self.say(markdown)
        self.say(f"wrote {self.bench_dir / RESULTS_JSON}, {self.bench_dir / RESULTS_MD}"
                 + "".join(f", {path}" for path in written)
                 + f" in {self.results['seconds']:.0f} s")
        for failure in self.failures:
            self.say(f"FAILED {failure}")
        return 1 if self.failures else 0

    def wanted(self, section: str, announce: bool = True) -> bool:
        """Whether to run `section`: selected, and (with --quick) likely to end in time."""
        if section not in self.options.sections:
            return False
        budget = self.preset.time_budget_seconds
        elapsed = time.monotonic() - self.started
        if budget and elapsed + SECTION_SECONDS.get(section, 0) > budget:
            if announce:
                reason = (f"skipped: {elapsed:.0f} s gone of the {budget:.0f} s --quick "
                          "budget (a busy machine); run it alone with --sections")
                self.results.setdefault("skipped_sections", {})[section] = reason
                self.say(f"  {section}: {reason}")
            return False
        return True

    def run_host(self) -> dict[str, Any] | None:
        self.say("  host: devices, auto's choice, matmul ceilings ...")
        dtypes = ["float32"] + [
            COMPUTE_DTYPES[p] for p in self.options.precisions if COMPUTE_DTYPES[p] != "float32"
        ]
        outcome = self.task(
            "host", {"ceiling_repeats": self.preset.ceiling_repeats, "dtypes": dtypes}, "host",
            timeout=600,
        )
        if not outcome.ok:
            self.say(f"  host failed: {outcome.error}")
            return None
        host = outcome.result
        self.results["host"] = host
        self.device = host["device"]
        ceilings = ", ".join(
            f"{dtype} {c['gflops']:.0f} GFLOP/s ({c['size']}²)"
            for dtype, c in host["ceilings"].items()
        )
        self.say(f"  host: {host['cpu']['model_name']} {host['device']}; ceilings: {ceilings}; "
                 f"auto: {host['auto']['precision']}, xla {host['auto']['xla']} "
                 f"({outcome.seconds:.0f} s)")
        self.save()
        return host

    def choose_models(self, registered: list[str], user_model: str | None = None) -> list[str]:
        if user_model:  # --model-file: that model, plus any --models asked for
            return [user_model, *self.choose_models(registered)] if self.options.models \
                else [user_model]
        if not self.options.models:
            return registered
        unknown = [name for name in self.options.models if name not in registered]
        if unknown:
            raise UsageError(f"unknown model(s) {unknown}; registered: {', '.join(registered)}")
        return list(self.options.models)

    def _setup(self, model: str):
        return model_setup(
            model, self.device, self.options.quick, self.options.batch_size,
            self.options.input_shape,
        )

    def run_throughput(self, models: list[str]) -> None:
        # The seed model first: --quick decides from its cells what else is worth measuring.
        ordered = sorted(models, key=lambda name: name != SEED_MODEL)
        cells = [
            (model, precision, xla)
            for model in ordered
            for precision in self.options.precisions
            for xla in self.options.xla
        ]
        ceiling_sizes = {d: c["size"] for d, c in self.results["host"]["ceilings"].items()}
        rows: list[dict[str, Any]] = []
        self.results["throughput"] = rows
        self.say(f"  throughput: up to {len(cells)} cells, each in a fresh process")
        for index, (model, precision, xla) in enumerate(cells, 1):
            setup = self._setup(model)
            seed_speedups = {
                (row["precision"], row["xla"]): row["speedup"] for row in rows
                if row["model"] == SEED_MODEL and row.get("speedup") is not None
            }
            skip = cell_skip_reason(
                model, precision, xla, self.device, self.options.quick, seed_speedups
            )
            if skip:
                rows.append({
                    "model": model, "precision": precision, "xla": xla,
                    "batch_size": setup.batch_size, "input_shape": list(setup.input_shape),
                    "unit": setup.unit, "status": "skipped", "error": skip,
                })
                self.say(f"  [{index}/{len(cells)}] {model} {precision} "
                         f"xla={'on' if xla else 'off'}: skipped ({skip})")
                continue
            spec = {
                "model": model,
                "precision": precision,
                "xla": xla,
                "batch_size": setup.batch_size,
                "input_shape": list(setup.input_shape),
                "num_classes": setup.num_classes,
                "warmup_seconds": self.preset.warmup_seconds,
                "window_seconds": self.preset.window_seconds,
                "windows": self.preset.windows,
                "ceiling_sizes": ceiling_sizes,
                "time_budget_seconds": self.preset.cell_budget_seconds,
                # The MFU-target cell also says where its time goes.
                "profile_steps": self.preset.profile_steps if (
                    model == SEED_MODEL and precision == REFERENCE_PRECISION and not xla
                ) else 0,
            }
            load = self._load()
            outcome = self.task(
                "train_cell", spec, f"cell-{model}-{precision}-xla{'on' if xla else 'off'}",
                timeout=self.preset.cell_timeout_seconds,
            )
            row = {
                "model": model,
                "precision": precision,
                "xla": xla,
                "batch_size": setup.batch_size,
                "input_shape": list(setup.input_shape),
                "unit": setup.unit,
                "status": outcome.status,
                "error": outcome.error,
                "seconds": round(outcome.seconds, 1),
                "load_average_1m": load,
                **(outcome.result or {}),
            }
            rows.append(row)
            _add_speedups(rows)
            self.say(f"  [{index}/{len(cells)}] {model} {precision} xla={'on' if xla else 'off'}"
                     f": {_cell_summary(row)} ({outcome.seconds:.0f} s, load {load})")
            self.save()

    def run_auto_check(self, models: list[str]) -> None:
        """The Trainer's `auto` (autotune) per model, against the fastest measured cell."""
        self.say("  auto check: what the Trainer's auto chooses per model, vs the fastest cell")
        choices: dict[str, dict[str, Any]] = {}
        for model in models:
            setup = self._setup(model)
            outcome = self.task("auto_choice", {
                "model": model, "input_shape": list(setup.input_shape),
                "batch_size": setup.batch_size, "num_classes": setup.num_classes,
            }, f"auto-{model}", timeout=self.preset.cell_timeout_seconds)
            choices[model] = outcome.result if outcome.ok else {
                "auto": None, "status": outcome.status, "error": outcome.error}
        rows = auto_check_rows(self.results.get("throughput", []), choices)
        self.results["auto_check"] = rows
        self.results["auto_choices"] = choices
        for row in rows:
            ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.2f}x"
            self.say(f"    {row['model']}: auto {row['auto']} ({row['auto_status']}), "
                     f"fastest {row['fastest']}, ratio {ratio}")
        self.save()

    def run_largest_batch(self, models: list[str]) -> None:
        chosen = self.preset.largest_batch_models
        models = [m for m in models if chosen is None or m in chosen]
        cap = None if self.device == "GPU" else self.options.memory_cap_mb
        rows: list[dict[str, Any]] = []
        self.results["largest_batch"] = {"memory_cap_mb": cap, "rows": rows}
        self.say(f"  largest batch: {', '.join(models) or 'no model'}"
                 + (f", CPU memory cap {cap:.0f} MB (peak RSS)" if cap else ", GPU memory"))
        for model in models:
            setup = self._setup(model)
            for precision in self.options.precisions:
                skip = self._batch_search_skip_reason(model, precision)
                if skip:
                    rows.append({"model": model, "precision": precision, "skipped": skip})
                    self.say(f"    {model} {precision}: skipped ({skip})")
                    continue
                row = self._search_batch(model, precision, setup, cap)
                rows.append(row)
                self.say(f"    {model} {precision}: largest batch {row['largest']}"
                         f" (first failure {row['first_failure']}, "
                         f"{len(row['probes'])} fresh probes, {row['seconds']:.0f} s)")
                self.save()

    def _search_batch(self, model: str, precision: str, setup, cap: float | None) -> dict:
        """Doubling in one process (a "ladder"), then fresh processes for everything the
        ladder could not settle: its first failure and the bisection probes."""
        started = time.monotonic()
        params = {
            "model": model,
            "precision": precision,
            "input_shape": list(setup.input_shape),
            "num_classes": setup.num_classes,
        }
        batches, batch = [], max(1, setup.batch_size)
        while batch < self.preset.max_batch:
            batches.append(batch)
            batch *= 2
        batches.append(self.preset.max_batch)
        name = f"ladder-{model}-{precision}"
        progress_path = self.bench_dir / "tasks" / f"{name}.progress.jsonl"
        progress_path.parent.mkdir(parents=True, exist_ok=True)
        progress_path.unlink(missing_ok=True)
        self.task(
            "batch_ladder", {**params, "batches": batches, "progress_path": str(progress_path)},
            name, timeout=self.preset.probe_timeout_seconds * 2, memory_cap_mb=cap,
        )
        peaks: dict[int, float] = {}
        for line in progress_path.read_text().splitlines() if progress_path.exists() else []:
            step = json.loads(line)
            if step["fits"] and (not cap or step["peak_memory_mb"] <= cap):
                peaks[step["batch"]] = step["peak_memory_mb"]
        ladder = sorted(peaks)

        def fits(batch: int) -> bool | None:
            if batch in peaks:
                return True
            outcome = self.task(
                "batch_probe", {**params, "batch_size": batch},
                f"probe-{model}-{precision}-b{batch}",
                timeout=self.preset.probe_timeout_seconds, memory_cap_mb=cap,
            )
            if outcome.status == "over_memory_cap":
                return False
            if not outcome.ok:
                return None
            result = outcome.result
            if result.get("fits") and cap and result["peak_memory_mb"] > cap:
                return False  # a spike between two polls; the child's own peak saw it
            if result.get("fits"):
                peaks[batch] = result["peak_memory_mb"]
            return bool(result.get("fits"))

        search = search_largest_batch(
            fits, setup.batch_size, self.preset.max_batch, self.preset.largest_batch_resolution
        )
        search["probes"] = [probe for probe in search["probes"] if probe[0] not in ladder]
        return {
            "model": model,
            "precision": precision,
            "input_shape": list(setup.input_shape),
            "ladder_fits": ladder,
            "peak_memory_mb_at_largest": peaks.get(search["largest"]),
            "seconds": round(time.monotonic() - started, 1),
            **search,
        }

    def _batch_search_skip_reason(self, model: str, precision: str) -> str | None:
        if not self.options.quick:
            return None
        cells = {
            (row["precision"], row["xla"]): row
            for row in self.results.get("throughput", [])
            if row["model"] == model and row["status"] == "ok"
        }
        speedup = (cells.get((precision, False)) or {}).get("speedup")
        if speedup is not None and speedup < MIN_SPEEDUP_FOR_BATCH_SEARCH:
            return f"trains at {speedup:.2f}x float32 here; each probe would take minutes"
        return None

    def prepare_data(self) -> dict[str, Any] | None:
        self.say("  data: built-in digits, exported and ingested once ...")
        outcome = self.task(
            "prepare_data",
            {"data_dir": str(self.bench_dir / "data"), "replicate": self.preset.ingest_replicate},
            "prepare-data",
            timeout=600,
        )
        if not outcome.ok:
            self.say(f"  data failed: {outcome.error}")
            return None
        self.results["data"] = outcome.result
        return outcome.result

    def _pipeline_defaults(self) -> dict[str, Any]:
        """The model and trainer settings `mptfx run` uses by default."""
        from pipelines.config import Config

        config = Config()
        return {
            "model": config.model.name,
            "input_size": list(config.model.input_size),
            "batch_size": config.trainer.batch_size,
            "precision": config.trainer.precision,
            "xla": config.trainer.xla,
            "epochs": config.trainer.epochs,
        }

    def run_input_pipeline(self, data: dict[str, Any]) -> None:
        defaults = self._pipeline_defaults()
        seed_size = list(model_setup(SEED_MODEL, self.device, self.options.quick).input_shape[:2])
        input_sizes = [defaults["input_size"]]
        if defaults["model"] == SEED_MODEL and seed_size != defaults["input_size"]:
            input_sizes.append(seed_size)
        timing = {
            "model": defaults["model"],
            "precision": "float32",
            "xla": False,
            "batch_size": defaults["batch_size"],
            "input_shape": [1, 1, 1],
            "warmup_seconds": self.preset.warmup_seconds,
            "window_seconds": self.preset.window_seconds,
            "windows": self.preset.windows,
            "time_budget_seconds": self.preset.cell_budget_seconds,
        }
        self.say(f"  input pipeline: Trainer tf.data vs model at {input_sizes}, digits "
                 f"x{data['replicate']} ...")
        outcome = self.task("input_pipeline", {
            "data": data["replicated"],
            "model": defaults["model"],
            "input_sizes": input_sizes,
            "batch_size": defaults["batch_size"],
            "precision": defaults["precision"],
            "xla": defaults["xla"],
            "timing": timing,
            "epochs": self.preset.input_epochs,
        }, "input-pipeline", timeout=600)
        section: dict[str, Any] = {"status": outcome.status, "error": outcome.error}
        if outcome.ok:
            section["rows"] = outcome.result["rows"]
            for row in section["rows"]:
                self.say(f"    {row['input_size']}: delivered "
                         f"{row['delivered_images_per_sec']:.0f} img/s decoding, "
                         f"{row['delivered_cached_images_per_sec']:.0f} img/s cached; model "
                         f"consumes {row['consumed_images_per_sec']:.0f} img/s")
        self.results["input_pipeline"] = section
        self.save()

        self.say("  ingest vs ImportExampleGen on the same TFRecords ...")
        outcome = self.task("ingest_compare", {
            "data": data, "out_dir": str(self.bench_dir / "ingest-compare"),
        }, "ingest-compare", timeout=900)
        ingest_section = {
            "status": outcome.status, "error": outcome.error, **(outcome.result or {})
        }
        if outcome.ok:
            self.say(f"    {ingest_section['records']} records: ours "
                     f"{ingest_section['ours_seconds']:.1f} s, ImportExampleGen "
                     f"{ingest_section['import_example_gen_seconds']:.1f} s")
        self.results["ingest"] = ingest_section
        self.save()

    def run_overhead(self, data: dict[str, Any]) -> None:
        defaults = self._pipeline_defaults()
        self.say(f"  trainer overhead: run_fn vs plain model.fit, {defaults['model']} "
                 f"{defaults['input_size']}, digits x{data['replicate']}, "
                 f"{self.preset.overhead_rounds} rounds ...")
        outcome = self.task("trainer_overhead", {
            "data": data["replicated"],
            "model": defaults["model"],
            "input_size": defaults["input_size"],
            "batch_size": defaults["batch_size"],
            "precision": defaults["precision"],
            "xla": defaults["xla"],
            "epochs": self.preset.overhead_epochs,
            "work_dir": str(self.bench_dir / "overhead"),
            "rounds": self.preset.overhead_rounds,
        }, "trainer-overhead", timeout=900)
        section = {"status": outcome.status, "error": outcome.error, **(outcome.result or {})}
        if outcome.ok:
            self.say(f"    plain fit {section['plain_fit_images_per_sec']:.0f} img/s, Trainer "
                     f"{section['trainer_images_per_sec']:.0f} img/s, ratio {section['ratio']:.2f}")
        self.results["overhead"] = section
        self.save()

    def run_publication(self, data: dict[str, Any]) -> None:
        defaults = self._pipeline_defaults()
        self.say(f"  publication: SavedModel vs TF Lite, {defaults['model']} "
                 f"{defaults['input_size']} ...")
        work_dir = self.bench_dir / "publication"
        shutil.rmtree(work_dir, ignore_errors=True)
        outcome = self.task("publication", {
            "data": data,
            "model": defaults["model"],
            "input_size": defaults["input_size"],
            "epochs": self.preset.publication_epochs,
            "work_dir": str(work_dir),
            "variants": ["fp32", "fp16", "dynamic_int8", "int8"],
            "latency_runs": self.preset.latency_runs,
            "batch_size": 256,
        }, "publication", timeout=900)
        section = {"status": outcome.status, "error": outcome.error}
        if outcome.ok:
            section["rows"] = outcome.result["rows"]
            for row in section["rows"]:
                self.say(f"    {row['format']}: {row['bytes'] / 1024:.0f} KiB, "
                         f"p50 {row['latency_ms_p50']:.3f} ms")
        self.results["publication"] = section
        self.save()

    def run_pipeline(self) -> None:
        workspace = self.bench_dir / "pipeline-run"
        shutil.rmtree(workspace, ignore_errors=True)  # a cold run: nothing cached
        command = [sys.executable, "-m", "pipelines.cli", "run", "--json",
                   "--workspace", str(workspace)]
        self.say("  pipeline: mptfx run --json (default config, fresh workspace) ...")
        started = time.monotonic()
        log_path = self.bench_dir / "logs" / "pipeline-run.log"
        try:
            with open(log_path, "w") as log:
                completed = subprocess.run(
                    command, stdout=subprocess.PIPE, stderr=log, text=True,
                    timeout=self.preset.pipeline_timeout_seconds,
                )
            summary = json.loads(completed.stdout)
        except subprocess.TimeoutExpired:
            summary, completed = None, None
            error = f"timed out after {self.preset.pipeline_timeout_seconds:.0f} s"
        except ValueError:
            summary, error = None, f"no JSON summary on stdout (exit {completed.returncode})"
        section: dict[str, Any] = {
            "command": "mptfx run --json --workspace <fresh folder>",
            "seconds": round(time.monotonic() - started, 1),
        }
        if summary is None:
            section.update(status="failed", error=f"{error}; log: {log_path}")
            self.failures.append(f"pipeline: {section['error']}")
        else:
            section.update(
                status=summary.get("status"),
                wall_seconds=summary.get("wall_seconds"),
                components={name: {"status": c.get("status"), "seconds": c.get("seconds")}
                            for name, c in summary.get("components", {}).items()},
                trainer_images_per_sec=(summary.get("trainer") or {}).get("images_per_sec"),
            )
            if summary.get("status") != "completed":
                self.failures.append(f"pipeline: {summary.get('error')} (log: {log_path})")
            self.say(f"    {summary.get('status')} in {summary.get('wall_seconds')} s")
        self.results["pipeline"] = section
        self.save()

    def run_stock_tfx(self, data: dict[str, Any]) -> None:
        """The default `mptfx run` and a stock TFX pipeline on the same digits, each in a
        fresh process, wall time from process start to exit (imports included)."""
        if "pipeline" not in self.results:
            self.run_pipeline()
        defaults = self._pipeline_defaults()
        work_dir = self.bench_dir / "stock-tfx"
        shutil.rmtree(work_dir, ignore_errors=True)
        self.say(f"  stock TFX: ImportExampleGen ... Pusher with LocalDagRunner, "
                 f"{defaults['model']} {defaults['epochs']} epochs ...")
        outcome = self.task("stock_tfx", {
            "examples_dir": data["examples_dir"], "work_dir": str(work_dir),
            "training": {"epochs": defaults["epochs"], "batch_size": defaults["batch_size"],
                         "input_size": defaults["input_size"]},
        }, "stock-tfx", timeout=self.preset.pipeline_timeout_seconds)
        ours = (self.results.get("pipeline") or {}).get("seconds")
        section: dict[str, Any] = {
            "status": outcome.status, "error": outcome.error,
            "components": ["ImportExampleGen", "StatisticsGen", "SchemaGen", "Trainer",
                           "Evaluator", "Pusher"],
            "mptfx_run_seconds": ours,
            "stock_tfx_seconds": round(outcome.seconds, 1),
            **(outcome.result or {}),
        }
        section["ratio"] = (ours / outcome.seconds) if outcome.ok and ours else None
        if outcome.ok:
            self.say(f"    mptfx run {ours} s, stock TFX {outcome.seconds:.1f} s, ratio "
                     + (f"{section['ratio']:.2f}" if section["ratio"] else "n/a"))
        self.results["stock_tfx"] = section
        self.save()

    @staticmethod
    def _load() -> float:
        return round(os.getloadavg()[0], 2)


def _add_speedups(rows: list[dict[str, Any]]) -> None:
    """speedup = samples/sec over the same model's float32 without XLA in this run."""
    reference = {
        row["model"]: row["samples_per_sec"]
        for row in rows
        if row["precision"] == REFERENCE_PRECISION and not row["xla"] and row["status"] == "ok"
    }
    for row in rows:
        base = reference.get(row["model"])
        row["speedup"] = (
            row["samples_per_sec"] / base if base and row["status"] == "ok" else None
        )


def _cell_summary(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['status']}: {row['error']}"
    speedup = f", {row['speedup']:.2f}x" if row.get("speedup") is not None else ""
    return (f"{row['samples_per_sec']:.1f} {row['unit']}/s, {row['step_ms']:.1f} ms/step"
            f"{speedup}, MFU {row['mfu']:.0%}, {row['memory_kind']} "
            f"{row['peak_memory_mb']:.0f} MB")


def run_bench(options: BenchOptions, out: TextIO = sys.stdout) -> int:
    """Runs `mptfx bench` with `options`; returns the process exit code."""
    return BenchRun(options, out).run()
