"""What every bench section is, and the cell formats the tables share.

A section (one module of benchmarks/sections/, listed in its `SECTIONS`) owns its worker
tasks (benchmarks/sections/tasks.py), the step that runs them and writes its entries into
the run's results, the markdown table results.md shows of them, and the verdicts drawn
from them. The table and the verdicts read only the results dict, so an old results.json
can be rendered again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from benchmarks.sections.tasks import Task

if TYPE_CHECKING:
    from benchmarks.sections.context import Context


class Section:
    """One part of `mptfx bench`.

    Attributes:
        name: its --sections name (benchmarks/plan.py SECTIONS) and its key in results.json.
        tasks: the worker tasks it starts; benchmarks/worker.py runs them by name.
        required: the run stops (exit 1) when this section left no entry in the results.
        selectable: a --sections choice (the host always runs; a rendering-only section
            is never asked for).
    """

    name = ""
    tasks: tuple[Task, ...] = ()
    required = False
    selectable = True

    def wanted(self, ctx: Context) -> bool:
        """Whether this run runs it: selected, and (with --quick) likely to end in time."""
        return ctx.wanted(self.name)

    def run(self, ctx: Context) -> None:
        """Measures, writes its entries into `ctx.results` and saves them."""
        raise NotImplementedError(self.name)

    def table(self, results: dict[str, Any]) -> list[str]:
        """Its lines of results.md (none when the results hold nothing of it)."""
        return []

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        """Its plain-sentence findings."""
        return []


@dataclasses.dataclass(frozen=True)
class Suite:
    """A set of sections run together: `mptfx bench` (benchmarks/sections/__init__.py
    `BENCH`) or the developer lab run from the checkout (tools/lab, `LAB`).

    Attributes:
        title: the command, as the console and results.md name it.
        sections: its sections in the order they run (the host first).
        worker: the module its task processes run (`python -m WORKER TASK ...`).
        seconds: typical --quick seconds per section name, for the --quick time budget.
    """

    title: str
    sections: tuple[Section, ...]
    worker: str
    seconds: Mapping[str, float]

    @property
    def names(self) -> tuple[str, ...]:
        """The --sections choices: every section a run can ask for (not the host)."""
        return tuple(s.name for s in self.sections if s.selectable)


def xla(on: bool) -> str:
    return "on" if on else "off"


def shape(dims: list[int]) -> str:
    return "×".join(str(d) for d in dims)


def number(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def short(text: str | None, limit: int = 120) -> str:
    text = (text or "").replace("|", "/").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def targets_table(targets: list[tuple[str, str, str, str]]) -> list[str]:
    """The markdown table of a section's (what, measured, target, verdict) rows."""
    return ["| target | measured | target | verdict |", "|---|---:|---|---|",
            *(f"| {what} | {measured} | {target} | {verdict} |"
              for what, measured, target, verdict in targets), ""]


def status_line(title: str, section: dict[str, Any]) -> list[str]:
    """`title: status: error` for a section that did not measure (none when it did not run)."""
    if not section.get("status"):
        return []
    return [f"{title}: {section['status']}: {section.get('error')}", ""]
