"""The benchmark results as markdown tables, and the verdicts drawn from them.

Each section (benchmarks/sections/) renders its own table and verdicts; this module puts
them together in the sections' order. Both read only the results dict that `results.json`
holds, so a table can be re-rendered from an old run:

    results = json.load(open("workspace/bench/results.json"))
    print(render_markdown(results))
"""

from __future__ import annotations

from typing import Any

from benchmarks.sections import SECTIONS
from benchmarks.sections.base import number


def verdicts(results: dict[str, Any]) -> list[str]:
    """Plain-sentence findings: fastest cell vs `auto`, MFU target, ratios, TF Lite sizes."""
    return [line for section in SECTIONS for line in section.verdicts(results)]


def render_markdown(results: dict[str, Any]) -> str:
    """All tables, then the verdicts, as one markdown document."""
    lines = [
        "## mptfx bench results",
        "",
        f"Command: `{results.get('command')}` · started {results.get('started')} · "
        f"{results.get('seconds', 0):.0f} s · load average (1 min) "
        f"{number((results.get('load_average_start') or [None])[0], 2)} at start, "
        f"{number((results.get('load_average_end') or [None])[0], 2)} at end",
        "",
    ]
    for section in SECTIONS:
        lines += section.table(results)
    found = results.get("verdicts") or verdicts(results)
    if found:
        lines += ["### Verdicts", ""] + [f"- {line}" for line in found] + [""]
    for section, reason in (results.get("skipped_sections") or {}).items():
        lines.append(f"- {section}: {reason}")
    for failure in results.get("failures") or []:
        lines.append(f"- FAILED: {failure}")
    return "\n".join(lines).rstrip() + "\n"
