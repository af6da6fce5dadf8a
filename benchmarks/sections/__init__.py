"""The sections of `mptfx bench`, one module each, in the order they run and results.md
shows them.

Each module has a `SECTION` (a `base.Section`): the worker tasks it starts (a frozen
parameters dataclass and a measure each, `tasks.Task`), its run step, its table and its
verdicts. A new section: a module here, its line in `SECTIONS`, and its name in
benchmarks/plan.py `SECTIONS` (the --sections choices; `SECTION_SECONDS` for the --quick
time budget). benchmarks/runner.py runs the list, benchmarks/report.py renders it and
benchmarks/worker.py runs its tasks by name (`TASKS`).
"""

from __future__ import annotations

from benchmarks.sections import (
    auto_check,
    data,
    data_scale,
    host,
    input_pipeline,
    largest_batch,
    overhead,
    pipeline,
    publication,
    stock_tfx,
    throughput,
    time_breakdown,
)
from benchmarks.sections.base import Section
from benchmarks.sections.tasks import Task

SECTIONS: tuple[Section, ...] = (
    host.SECTION,
    throughput.SECTION,
    auto_check.SECTION,
    time_breakdown.SECTION,
    largest_batch.SECTION,
    input_pipeline.SECTION,
    overhead.SECTION,
    publication.SECTION,
    pipeline.SECTION,
    stock_tfx.SECTION,
    data_scale.SECTION,
)

TASKS: dict[str, Task] = {
    task.name: task
    for task in (data.PREPARE_DATA, *(task for section in SECTIONS for task in section.tasks))
}
