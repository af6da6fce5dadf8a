"""`mptfx run --json` as a user types it, timed: the bench sections that measure whole runs
(photo_quality, distillation) start it here.

    summary, seconds, command = run_json(["--workspace", "/tmp/ws", "--set", "trainer.epochs=3"])
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any


def run_json(args: list[str]) -> tuple[dict[str, Any], float, str]:
    """(summary.json as `--json` prints it, wall seconds, the command line as typed) of
    `mptfx run --json ARGS`, the `mptfx` beside this Python.

    Raises:
        RuntimeError: the run exited non-zero (naming its last line on stderr).
    """
    mptfx = os.path.join(os.path.dirname(sys.executable), "mptfx")
    command = [mptfx, "run", "--json", *args]
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"mptfx run exited {completed.returncode}: "
                           f"{completed.stderr.strip().splitlines()[-1:]}")
    return json.loads(completed.stdout), seconds, " ".join(["mptfx", *command[1:]])
