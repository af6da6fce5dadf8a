"""The benchmark results as markdown tables, and the verdicts drawn from them.

Each section (benchmarks/sections/) renders its own table and verdicts; this module puts
them together in the sections' order. Both read only the results dict that `results.json`
holds, so a table can be re-rendered from an old run:

    results = json.load(open("workspace/bench/results.json"))
    print(render_markdown(results))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.sections import SECTIONS
from benchmarks.sections.base import Section, number


def verdicts(results: dict[str, Any], sections: Sequence[Section] = SECTIONS) -> list[str]:
    """Plain-sentence findings: each model's fastest cell, `auto`'s measured choice against
    it, the batch and input-pipeline findings, the photo-scale targets."""
    return [line for section in sections for line in section.verdicts(results)]


def header(results: dict[str, Any]) -> str:
    """The command, when it started, how long it took and the load around it."""
    return (
        f"Command: `{results.get('command')}` · started {results.get('started')} · "
        f"{results.get('seconds', 0):.0f} s · load average (1 min) "
        f"{number((results.get('load_average_start') or [None])[0], 2)} at start, "
        f"{number((results.get('load_average_end') or [None])[0], 2)} at end"
    )


def render_markdown(results: dict[str, Any], sections: Sequence[Section] = SECTIONS,
                    title: str = "mptfx bench") -> str:
    """All tables, then the verdicts, as one markdown document."""
    lines = [f"## {title} results", "", header(results), ""]
    lines += body(results, sections)
    return "\n".join(lines).rstrip() + "\n"


def body(results: dict[str, Any], sections: Sequence[Section] = SECTIONS) -> list[str]:
    """The sections' tables, the verdicts and what failed or did not run."""
    lines: list[str] = []
    for section in sections:
        lines += section.table(results)
    found = results.get("verdicts") or verdicts(results, sections)
    if found:
        lines += ["### Verdicts", ""] + [f"- {line}" for line in found] + [""]
    for failure in results.get("failures") or []:
        lines.append(f"- FAILED: {failure}")
    return lines
