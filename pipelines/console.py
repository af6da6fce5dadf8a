"""What a command shows on the terminal, and where the libraries' output goes instead.

Every command that runs the pipeline (run, retrain, k8s compile and submit) keeps the
terminal for its own one-line messages and sends TensorFlow's, TFX's and Beam's chatter to a
log file in the run's folder:

    quiet_tensorflow()                                     # before TensorFlow is imported
    with library_output_to(run_dir / "pipeline.log", console_fd=1) as out:
        print("mptfx run ...: 9 components", file=out)   # the terminal
        ...                                                # the libraries: pipeline.log
    print(f"mptfx: error: {one_line(error)}")            # components/core/text.py
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from components.redact import redact_text


class _RedactingFormatter(logging.Formatter):
    """pipeline.log lines (tracebacks included) with every URI's password removed."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


def quiet_tensorflow() -> None:
    """Silence TensorFlow's C++ and gRPC logs and Python warnings on the terminal."""
    # Must happen before TensorFlow is imported; the full log still goes to pipeline.log.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    warnings.filterwarnings("ignore")


@contextlib.contextmanager
def library_output_to(log_path: Path, console_fd: int) -> Iterator[TextIO]:
    """Send everything the libraries print (Python logging, Keras progress, TensorFlow's C++
    messages on file descriptors 1 and 2) to `log_path`; yield a stream to the terminal for
    our own lines. Descriptors are restored on the way out, also on errors."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    console = os.fdopen(os.dup(saved[console_fd]), "w", buffering=1)
    handler = logging.StreamHandler(os.fdopen(os.dup(log_fd), "w", buffering=1))
    handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    previous_handlers, previous_level = list(root.handlers), root.level
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    for fd in (1, 2):
        os.dup2(log_fd, fd)
    try:
        yield console
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, original in saved.items():
            os.dup2(original, fd)
            os.close(original)
        os.close(log_fd)
        root.handlers, root.level = previous_handlers, previous_level
        handler.close()
        console.close()

