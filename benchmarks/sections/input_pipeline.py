"""`input_pipeline`: does the Trainer's tf.data pipeline keep up with the model?

The `input_pipeline` task times the Trainer's `make_dataset` alone on the ingested digits
(decoding every epoch, and from its cache of decoded images) against the model training on
synthetic data at the same size, batch and precision (benchmarks/measures/input_pipeline.py). The
`ingest_compare` task then times mptfx's ingest against TFX's ImportExampleGen on the
same TFRecords (results.json `ingest`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.plan import SEED_MODEL, CellSpec, model_setup
from benchmarks.sections.base import number, shape, status_line
from benchmarks.sections.context import Context
from benchmarks.sections.data import DataSection, pipeline_defaults
from benchmarks.sections.tasks import Task, arguments


@dataclasses.dataclass(frozen=True)
class InputParams:
    """The replicated digits, the default `mptfx run` model at each of `input_sizes`, and
    how the model's consumption is timed (`timing`, a throughput cell's timing)."""

    data: dict[str, Any]
    model_name: str
    input_sizes: list[list[int]]
    batch_size: int
    precision: str
    xla: str
    timing: CellSpec
    epochs: int


@dataclasses.dataclass(frozen=True)
class IngestParams:
    """The prepared digits (their TFRecords) and where both ingests write."""

    data: dict[str, Any]
    out_dir: str


def measure_input(params: InputParams) -> dict[str, Any]:
    from benchmarks.measures.input_pipeline import pipeline_vs_model
    from components.trainer.precision import (
        describe_devices,
        resolve_precision_policy,
        resolve_xla,
    )

    devices = describe_devices()
    policy, _ = resolve_precision_policy(params.precision, devices)
    xla, _ = resolve_xla(params.xla, devices)
    return {"rows": pipeline_vs_model(**{**arguments(params), "precision": policy,
                                         "xla": xla})}


def measure_ingest(params: IngestParams) -> dict[str, Any]:
    from benchmarks.measures.input_pipeline import ingest_vs_import_example_gen

    return ingest_vs_import_example_gen(**arguments(params))


INPUT_PIPELINE = Task("input_pipeline", InputParams, measure_input)
INGEST_COMPARE = Task("ingest_compare", IngestParams, measure_ingest)


class InputPipeline(DataSection):
    name = "input_pipeline"
    tasks = (INPUT_PIPELINE, INGEST_COMPARE)

    def run(self, ctx: Context) -> None:
        data = ctx.data
        defaults = pipeline_defaults()
        seed_size = list(model_setup(SEED_MODEL, ctx.device, ctx.options.quick).input_shape[:2])
        input_sizes = [defaults["input_size"]]
        if defaults["model"] == SEED_MODEL and seed_size != defaults["input_size"]:
            input_sizes.append(seed_size)
        timing = CellSpec(
            model=defaults["model"], precision="float32", xla=False,
            batch_size=defaults["batch_size"], input_shape=(1, 1, 1),
            warmup_seconds=ctx.preset.warmup_seconds,
            window_seconds=ctx.preset.window_seconds, windows=ctx.preset.windows,
            time_budget_seconds=ctx.preset.cell_budget_seconds,
        )
        ctx.say(f"  input pipeline: Trainer tf.data vs model at {input_sizes}, digits "
                f"x{data['replicate']} ...")
        params = InputParams(
            data=data["replicated"], model_name=defaults["model"], input_sizes=input_sizes,
            batch_size=defaults["batch_size"], precision=defaults["precision"],
            xla=defaults["xla"], timing=timing, epochs=ctx.preset.input_epochs,
        )
        outcome = ctx.task(INPUT_PIPELINE, params, "input-pipeline", timeout=600)
        section: dict[str, Any] = {"status": outcome.status, "error": outcome.error}
        if outcome.ok:
            section["rows"] = outcome.result["rows"]
            for row in section["rows"]:
                ctx.say(f"    {row['input_size']}: delivered "
                        f"{row['delivered_images_per_sec']:.0f} img/s decoding, "
                        f"{row['delivered_cached_images_per_sec']:.0f} img/s cached; model "
                        f"consumes {row['consumed_images_per_sec']:.0f} img/s")
        ctx.store("input_pipeline", section)

        ctx.say("  ingest vs ImportExampleGen on the same TFRecords ...")
        params = IngestParams(data=data, out_dir=str(ctx.bench_dir / "ingest-compare"))
        outcome = ctx.task(INGEST_COMPARE, params, "ingest-compare", timeout=900)
        ingest = {"status": outcome.status, "error": outcome.error, **(outcome.result or {})}
        if outcome.ok:
            ctx.say(f"    {ingest['records']} records: ours {ingest['ours_seconds']:.1f} s, "
                    f"ImportExampleGen {ingest['import_example_gen_seconds']:.1f} s")
        ctx.store("ingest", ingest)

    def table(self, results: dict[str, Any]) -> list[str]:
        section = results.get("input_pipeline") or {}
        if not section.get("rows"):
            return status_line("Input pipeline", section) + _ingest_table(results)
        lines = [
            "### Input pipeline (Trainer's tf.data from the ingested digits TFRecords)",
            "",
            "Delivered: the Trainer's `make_dataset` iterated alone, decoding every epoch "
            "(`trainer.cache_max_mb=0`, or data larger than the cache) and from its in-memory "
            "cache of decoded images (the default when they fit); consumed: the model "
            "training on synthetic data alone, at the same size, batch and precision.",
            "",
            "| model | input | batch | precision | delivered img/s, decoding | "
            "delivered img/s, cached | model consumes img/s | decoding ÷ consumed | "
            "cached ÷ consumed |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|",
        ]
        for row in section["rows"]:
            lines.append(
                f"| {row['model']} | {shape(row['input_size'])} | {row['batch_size']} | "
                f"{row['precision']} | {number(row['delivered_images_per_sec'])} | "
                f"{number(row['delivered_cached_images_per_sec'])} | "
                f"{number(row['consumed_images_per_sec'])} | {row['ratio']:.2f} | "
                f"{row['cached_ratio']:.1f} |"
            )
        return lines + [""] + _ingest_table(results)

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        on_cpu = (results.get("host") or {}).get("device", "CPU") == "CPU"
        lines = []
        for row in (results.get("input_pipeline") or {}).get("rows", []):
            bound = ("input-bound" if row["ratio"] < 1.0
                     else "keeps up when it has the cores to itself")
            line = (f"Input pipeline at {shape(row['input_size'])}: decoding every epoch it "
                    f"delivers {row['ratio']:.2f}× what the model consumes ({bound}); from the "
                    f"in-memory cache of decoded images {row['cached_ratio']:.1f}×")
            if on_cpu:
                line += ("; on a CPU decoding shares the cores that train, which is why the "
                         "Trainer caches decoded images that fit in `trainer.cache_max_mb`")
            lines.append(line + ".")
        return lines


def _ingest_table(results: dict[str, Any]) -> list[str]:
    ingest = results.get("ingest") or {}
    if ingest.get("status") != "ok":
        return status_line("Ingest comparison", ingest)
    return [
        f"### Ingest vs TFX ImportExampleGen ({ingest['records']:,} records in "
        f"{ingest['files']} TFRecord files)",
        "",
        "| component | seconds | records/s | written |",
        "|---|---:|---:|---:|",
        f"| mptfx ingest (decode + check + re-encode every image) | "
        f"{ingest['ours_seconds']:.1f} | {ingest['ours_records_per_sec']:,.0f} | "
        f"{ingest['ours_written']:,} ({ingest['ours_quarantined']} quarantined) |",
        f"| ImportExampleGen (copies records, no decoding) | "
        f"{ingest['import_example_gen_seconds']:.1f} | "
        f"{ingest['import_example_gen_records_per_sec']:,.0f} | "
        f"{ingest['import_example_gen_written']:,} |",
        "",
    ]


SECTION = InputPipeline()
