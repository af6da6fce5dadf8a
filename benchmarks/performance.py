"""docs/PERFORMANCE.md: the one page where figures that change with the machine live.

Written from a run's results.json (`mptfx bench --write-docs docs/PERFORMANCE.md`, or
`make performance`), never by hand: it says the command, the date, the machine (CPU model,
logical CPUs, the CPU flags that decide low precision, devices, versions) and the load,
then the run's tables and verdicts. Prose elsewhere links here instead of quoting numbers.

Re-render an old run without measuring again:

    python -m benchmarks.performance workspace/bench/results.json docs/PERFORMANCE.md
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


def render_page(results: dict[str, Any], sections: Sequence[Section] = SECTIONS) -> str:
    """The page's markdown, from a results dict as results.json holds it."""
    lines = [
        "# Performance on the machine it was measured on",
        "",
        "<!-- Generated from results.json by `mptfx bench --write-docs docs/PERFORMANCE.md` "
        "(benchmarks/performance.py). Do not edit: run it again (`make performance`). -->",
        "",
        "Every figure below was measured in one run of the command on the machine named; "
        "another machine, load or version gives other figures. How to read them and what "
        "each section measures: [guide/benchmarks.md](guide/benchmarks.md).",
        "",
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
    lines += report.body(results, sections)
    return "\n".join(lines).rstrip() + "\n"


def write_page(results: dict[str, Any], path: Path,
               sections: Sequence[Section] = SECTIONS) -> Path:
    """Writes the page to `path` (its folder created); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(results, sections))
    return path


def main(argv: list[str]) -> int:
    """`python -m benchmarks.performance RESULTS_JSON PAGE`: re-render a stored run."""
    if len(argv) != 2:
        print("usage: python -m benchmarks.performance RESULTS_JSON PAGE", file=sys.stderr)
        return 2
    source, page = Path(argv[0]), Path(argv[1])
    try:
        results = json.loads(source.read_text())
    except (OSError, ValueError) as error:
        print(f"{source}: not a readable results.json ({error})", file=sys.stderr)
        return 2
    print(write_page(results, page))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
