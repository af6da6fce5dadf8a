"""The sections of `mptfx bench`, one module each, in the order they run and results.md
shows them: what a user needs to choose a training setup on this machine (precision, XLA,
batch size, input pipeline, photo-scale data, the photo model's quality, distillation),
what its predictions for new photos cost and what watching a run costs.

Each module has a `SECTION` (a `base.Section`): the worker tasks it starts (a frozen
parameters dataclass and a measure each, `tasks.Task`), its run step, its table and its
verdicts. A new section: a module here, its line in `SECTIONS`, and its name in
benchmarks/plan.py `SECTIONS` (the --sections choices; `SECTION_SECONDS` for the --quick
time budget). benchmarks/runner.py runs the list, benchmarks/report.py renders it and
benchmarks/worker.py runs its tasks by name (`TASKS`).

The developer instruments (MFU and matmul ceilings, kernels, op profiles, Trainer
overhead, publication formats, pipeline time, the stock-TFX comparison) are not here: they
live in tools/lab/ of the checkout, which reuses this machinery (`Suite`).
"""

from __future__ import annotations

from benchmarks.plan import SECTION_SECONDS
from benchmarks.sections import (
    auto_check,
    data,
    data_scale,
    distillation,
    host,
    input_pipeline,
    largest_batch,
    photo_quality,
    predict,
    system_metrics,
    throughput,
)
from benchmarks.sections.base import Section, Suite
from benchmarks.sections.tasks import Task

SECTIONS: tuple[Section, ...] = (
    host.SECTION,
    throughput.SECTION,
    auto_check.SECTION,
    largest_batch.SECTION,
    input_pipeline.SECTION,
    data_scale.SECTION,
    photo_quality.SECTION,
    predict.SECTION,
    system_metrics.SECTION,
    distillation.SECTION,
)

BENCH = Suite("mptfx bench", SECTIONS, "benchmarks.worker", SECTION_SECONDS)


def tasks_of(sections: tuple[Section, ...]) -> dict[str, Task]:
    """Every task of `sections` (and the shared data's) by name, as a worker runs them."""
    return {
        task.name: task
        for task in (data.PREPARE_DATA, *(task for section in sections for task in section.tasks))
    }


TASKS: dict[str, Task] = tasks_of(SECTIONS)
