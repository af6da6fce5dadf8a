"""Entry point of a lab task process: `python -m tools.lab.worker TASK PARAMS RESULT`,
mptfx bench's worker (benchmarks/worker.py) with the lab's tasks."""

from __future__ import annotations

import sys

from benchmarks.worker import main
from tools.lab.sections import TASKS

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], TASKS))
