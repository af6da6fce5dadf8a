"""docs/PERFORMANCE.md: the one page where figures that change with the machine live.

Written from a run's results.json (`mptfx bench --write-docs docs/PERFORMANCE.md`, or
`make performance`), never by hand: it says the command, the date, the machine (CPU model,
logical CPUs, the CPU flags that decide low precision, devices, versions) and the load,
then the run's tables and verdicts. Prose elsewhere links here instead of quoting numbers.

Re-render an old run without measuring again:

    python -m benchmarks.performance workspace/bench/results.json docs/PERFORMANCE.md

or several runs on one page (each under its own heading, with its own command and date):

    python -m benchmarks.performance quick/bench/results.json scale/bench/results.json \\
        docs/PERFORMANCE.md
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.sections import SECTIONS
from benchmarks.sections.base import Section, number


def machine_line(results: dict[str, Any]) -> str:
    """CPU, logical CPUs, flags of interest, devices and versions, from the host entry."""
    host = results.get("host") or {}
    cpu = host.get("cpu") or {}
    devices = ", ".join(d.get("name", "?") for d in host.get("devices") or []) or "unknown"
    return (f"{cpu.get('model_name', 'unknown CPU')}, {cpu.get('logical_cpus', '?')} logical "
            f"CPUs, CPU flags {', '.join(cpu.get('flags') or []) or 'none of interest'}; "
            f"devices: {devices}; TensorFlow {host.get('tensorflow', '?')}, "
            f"Keras {host.get('keras', '?')}")


def _run_lines(results: dict[str, Any], sections: Sequence[Section]) -> list[str]:
    """One run: its command, date, machine and load, then its tables and verdicts."""
    lines = [
        f"- Command: `{results.get('command')}`",
        f"- Date: {results.get('started')} ({results.get('seconds', 0):.0f} s)",
        f"- Machine: {machine_line(results)}",
        f"- Load average (1 min): "
        f"{number((results.get('load_average_start') or [None])[0], 2)} at start, "
        f"{number((results.get('load_average_end') or [None])[0], 2)} at end "
        f"(on {(results.get('host') or {}).get('cpu', {}).get('logical_cpus', '?')} "
        "logical CPUs)",
        "",
    ]
    return lines + report.body(results, sections)


def render_page(results: dict[str, Any] | Sequence[dict[str, Any]],
                sections: Sequence[Section] = SECTIONS) -> str:
    """The page's markdown, from one run's results dict (as results.json holds it) or from
    several runs, each under its own heading with its own command, date and machine."""
    runs = [results] if isinstance(results, dict) else list(results)
    lines = [
        "# Performance on the machine it was measured on",
        "",
        "<!-- Generated from results.json by `mptfx bench --write-docs docs/PERFORMANCE.md` "
        "(benchmarks/performance.py; several runs: `python -m benchmarks.performance "
        "A/results.json B/results.json docs/PERFORMANCE.md`). Do not edit: run it again "
        "(`make performance`). -->",
        "",
        "Every figure below was measured in one run of the command above it, on the machine "
        "named; another machine, load or version gives other figures. How to read them and "
        "what each section measures: [guide/benchmarks.md](guide/benchmarks.md).",
        "",
    ]
    for number_, run in enumerate(runs, 1):
        if len(runs) > 1:
            sections_run = ", ".join(run.get("sections") or []) or "?"
            lines += [f"## Run {number_}: {sections_run}", ""]
        lines += _run_lines(run, sections)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write_page(results: dict[str, Any] | Sequence[dict[str, Any]], path: Path,
               sections: Sequence[Section] = SECTIONS) -> Path:
    """Writes the page to `path` (its folder created); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(results, sections))
    return path


def main(argv: list[str]) -> int:
    """`python -m benchmarks.performance RESULTS_JSON [RESULTS_JSON ...] PAGE`: re-render
    stored runs, in the order given, on one page."""
    if len(argv) < 2:
        print("usage: python -m benchmarks.performance RESULTS_JSON [RESULTS_JSON ...] PAGE",
              file=sys.stderr)
        return 2
    runs = []
    for source in map(Path, argv[:-1]):
        try:
            runs.append(json.loads(source.read_text()))
        except (OSError, ValueError) as error:
            print(f"{source}: not a readable results.json ({error})", file=sys.stderr)
            return 2
    print(write_page(runs[0] if len(runs) == 1 else runs, Path(argv[-1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
