"""`publication`: the SavedModel against each TF Lite variant: size, latency, accuracy.

The `publication` task (tools/lab/publication.py) trains the default `mptfx run` model on
the digits, exports it and converts it; its verdicts hold the TF Lite sizes to their limits.
"""

from __future__ import annotations

import dataclasses
import shutil
from typing import Any

from benchmarks.sections.base import number, shape, status_line
from benchmarks.sections.context import Context
from benchmarks.sections.data import DataSection, pipeline_defaults
from benchmarks.sections.tasks import Task, arguments

TFLITE_SIZE_LIMITS = {"fp16": 0.52, "int8": 0.30}


@dataclasses.dataclass(frozen=True)
class PublicationParams:
    """The prepared digits, the model trained for `epochs`, the TF Lite `variants`, and
    `latency_runs` timed calls per format (the SavedModel's throughput at `batch_size`)."""

    data: dict[str, Any]
    model_name: str
    input_size: list[int]
    epochs: int
    work_dir: str
    variants: list[str]
    latency_runs: int
    batch_size: int


def measure(params: PublicationParams) -> dict[str, Any]:
    from tools.lab.publication import compare_formats

    return {"rows": compare_formats(**arguments(params))}


PUBLICATION = Task("publication", PublicationParams, measure)


class Publication(DataSection):
    name = "publication"
    tasks = (PUBLICATION,)

    def run(self, ctx: Context) -> None:
        defaults = pipeline_defaults()
        ctx.say(f"  publication: SavedModel vs TF Lite, {defaults['model']} "
                f"{defaults['input_size']} ...")
        work_dir = ctx.bench_dir / "publication"
        shutil.rmtree(work_dir, ignore_errors=True)
        params = PublicationParams(
            data=ctx.data, model_name=defaults["model"], input_size=defaults["input_size"],
            epochs=ctx.preset.publication_epochs, work_dir=str(work_dir),
            variants=["fp32", "fp16", "dynamic_int8", "int8"],
            latency_runs=ctx.preset.latency_runs, batch_size=256,
        )
        outcome = ctx.task(PUBLICATION, params, "publication", timeout=900)
        section = {"status": outcome.status, "error": outcome.error}
        if outcome.ok:
            section["rows"] = outcome.result["rows"]
            for row in section["rows"]:
                ctx.say(f"    {row['format']}: {row['bytes'] / 1024:.0f} KiB, "
                        f"p50 {row['latency_ms_p50']:.3f} ms")
        ctx.store("publication", section)

    def table(self, results: dict[str, Any]) -> list[str]:
        section = results.get("publication") or {}
        if not section.get("rows"):
            return status_line("Publication", section)
        first = section["rows"][0]
        lines = [
            f"### Publication ({shape(first['input_size'])} input, {first['eval_images']} eval "
            "images, CPU)",
            "",
            "| format | size KiB | × TF Lite fp32 | latency p50 ms | latency p99 ms "
            "| throughput img/s | threads | accuracy | agreement |",
            "|---|---:|---:|---:|---:|---:|---|---:|---:|",
        ]
        for row in section["rows"]:
            batch = "" if row["throughput_batch"] == 1 else f" (batch {row['throughput_batch']})"
            lines.append(
                f"| {row['format']} | {row['bytes'] / 1024:,.1f} | "
                f"{number(row.get('size_vs_tflite_fp32'), 3)} | {row['latency_ms_p50']:.3f} | "
                f"{row['latency_ms_p99']:.3f} | {row['throughput_images_per_sec']:,.0f}{batch} | "
                f"{row['threads']} | {row['accuracy']:.3f} | "
                f"{row['agreement_with_savedmodel']:.3f} |"
            )
        return lines + [""]

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        rows = (results.get("publication") or {}).get("rows", [])
        lines = []
        for variant, limit in TFLITE_SIZE_LIMITS.items():
            row = next((r for r in rows if r.get("variant") == variant), None)
            if row and row.get("size_vs_tflite_fp32") is not None:
                holds = "≤" if row["size_vs_tflite_fp32"] <= limit else "> (misses)"
                lines.append(f"TF Lite {variant}: {row['size_vs_tflite_fp32']:.3f}× the fp32 "
                             f"size {holds} {limit}×.")
        return lines


SECTION = Publication()
