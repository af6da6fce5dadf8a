"""The lab's sections, in the order they run: mptfx bench's host first (the device and the
models), then the developer instruments. `LAB` is the suite tools/lab/__main__.py runs
through mptfx bench's runner; tools/lab/worker.py runs its tasks (`TASKS`).
"""

from __future__ import annotations

from benchmarks.sections import host, tasks_of
from benchmarks.sections.base import Section, Suite
from benchmarks.sections.tasks import Task
from tools.lab.sections import mfu, overhead, pipeline, publication, stock_tfx, time_breakdown

SECTIONS: tuple[Section, ...] = (
    host.SECTION,
    mfu.SECTION,
    time_breakdown.SECTION,
    overhead.SECTION,
    publication.SECTION,
    pipeline.SECTION,
    stock_tfx.SECTION,
)

# Typical --quick seconds on the 2-core CI machine under load (for the time budget).
SECTION_SECONDS = {"mfu": 120.0, "overhead": 110.0, "publication": 45.0, "pipeline": 75.0,
                   "stock_tfx": 150.0}

LAB = Suite("mptfx lab (python -m tools.lab)", SECTIONS, "tools.lab.worker", SECTION_SECONDS)

TASKS: dict[str, Task] = tasks_of(SECTIONS)
