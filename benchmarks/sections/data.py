"""The digits the data sections share, and the settings `mptfx run` uses by default.

The built-in digits are exported and ingested once per run (the `prepare_data` task,
benchmarks/measures/input_pipeline.py), right before the first data section, when any data section
is wanted then. A data section runs only when they are there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.sections.base import Section
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task, arguments


@dataclasses.dataclass(frozen=True)
class DataParams:
    """data_dir: where the exported and ingested digits go; replicate: how many copies of
    the digits the replicated TFRecords hold (a longer epoch to time)."""

    data_dir: str
    replicate: int


def measure(params: DataParams) -> dict[str, Any]:
    from benchmarks.measures.input_pipeline import prepare_data

    return prepare_data(**arguments(params))


PREPARE_DATA = Task("prepare_data", DataParams, measure)


class DataSection(Section):
    """A section measured on the shared digits (`ctx.data`)."""

    def wanted(self, ctx: Context) -> bool:
        return ctx.wanted(self.name) and shared_data(ctx) is not None


def shared_data(ctx: Context) -> dict[str, Any] | None:
    """The prepared digits, prepared at the first call when a data section is wanted."""
    if not ctx.data_asked:
        ctx.data_asked = True
        names = [section.name for section in ctx.sections if isinstance(section, DataSection)]
        if any(ctx.wanted(name) for name in names):
            ctx.data = _prepare(ctx)
    return ctx.data


def _prepare(ctx: Context) -> dict[str, Any] | None:
    ctx.say("  data: built-in digits, exported and ingested once ...")
    params = DataParams(data_dir=str(ctx.bench_dir / "data"),
                        replicate=ctx.preset.ingest_replicate)
    outcome = ctx.task(PREPARE_DATA, params, "prepare-data", timeout=600)
    if not outcome.ok:
        ctx.say(f"  data failed: {outcome.error}")
        return None
    ctx.results["data"] = outcome.result
    return outcome.result


def pipeline_defaults() -> dict[str, Any]:
    """The model and trainer settings `mptfx run` uses by default."""
    from components.trainer.config import ModelSection, TrainerSection

    model, trainer = ModelSection(), TrainerSection()
    return {
        "model": model.name,
        "input_size": list(model.input_size),
        "batch_size": trainer.batch_size,
        "precision": trainer.precision,
        "xla": trainer.xla,
        "epochs": trainer.epochs,
    }
