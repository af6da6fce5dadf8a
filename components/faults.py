"""Fault injection for the crash tests: `MPTFX_FAULT=<point>` makes the process die at that
point as abruptly as `kill -9` (no cleanup, no finally blocks), to prove that every later
run recovers. Unset, each check is one dictionary lookup.

Points: `ingest` (half the examples written), `epoch` (inside the 2nd epoch),
`checkpoint` (the 2nd epoch's backup half-written), `push-copy` (the first file of a push
copied), `before-tflite` (pushed, TF Lite not started), `tflite` (one variant staged).
"""

from __future__ import annotations

import os

ENV_FAULT = "MPTFX_FAULT"
KILLED_EXIT_CODE = 137  # what a shell reports for SIGKILL


def fault_point(name: str) -> None:
    """Die here, now, when MPTFX_FAULT names this point."""
    if os.environ.get(ENV_FAULT) == name:
        os._exit(KILLED_EXIT_CODE)
