"""`python -m tools.lab`, from the checkout: the developer instruments.

    python -m tools.lab [--quick] [--sections mfu,overhead,publication,pipeline,stock_tfx]
                        [--workspace DIR] [--models A,B] [--precisions P,Q] [--xla off,on]

The options are mptfx bench's (benchmarks/commands.py); results go to
`<workspace>/lab/bench/` (results.json, results.md, logs/), beside the bench's own.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    # The task processes import tools.lab too: the checkout goes on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(CHECKOUT), *filter(None, [os.environ.get("PYTHONPATH")])])
    from benchmarks.commands import add_arguments, bench_options
    from benchmarks.runner import run_bench
    from components.errors import UsageError
    from tools.lab.sections import LAB

    parser = argparse.ArgumentParser(
        prog="python -m tools.lab",
        description="mptfx's developer instruments (MFU and ceilings, kernels, op profiles, "
                    "Trainer overhead, publication formats, pipeline time, stock TFX).")
    add_arguments(parser, LAB.names)
    args = parser.parse_args(argv)
    args.workspace = str(Path(args.workspace) / "lab")
    try:
        options = bench_options(args, LAB.names, "python -m tools.lab")
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return run_bench(options, suite=LAB, write_docs=args.write_docs)


if __name__ == "__main__":
    sys.exit(main())
