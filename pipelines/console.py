"""What a command shows on the terminal, and where the libraries' output goes instead.

The terminal shows mptfx's own lines. What TensorFlow, TFX, Beam and MLflow print (C++ log
lines on descriptor 2, Python warnings and log records, Keras progress) goes to a log file:
the run's `pipeline.log` for the commands that run the pipeline (run, retrain, sweep),
`compile.log` / `driver.log` for `mptfx k8s`. `mptfx ... --verbose` shows it on the
terminal as well (the log file still gets all of it).

    with library_output(console_fd=1) as output:           # before TensorFlow is imported
        config = load_config(...)                          # its start-up lines are held ...
        output.move_to(run_dir / "pipeline.log")           # ... and land at the log's top
        print("mptfx run ...: 11 components", file=output.console)   # the terminal
    print(f"mptfx: error: {one_line(error)}")            # components/core/text.py

Commands with no log file of their own (doctor, serve, monitor) call `quiet_tensorflow()`
before they import TensorFlow: its chatter is dropped unless `--verbose`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from components.redact import redact_text

_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# How long closing waits for the --verbose copier to drain what is still in the pipe.
_DRAIN_SECONDS = 5.0
_verbose = False


def set_verbose(verbose: bool) -> None:
    """`--verbose`: show the libraries' output on the terminal too (the CLI sets it once)."""
    global _verbose
    _verbose = verbose


def is_verbose() -> bool:
    """Whether this command was given `--verbose`."""
    return _verbose


class _RedactingFormatter(logging.Formatter):
    """pipeline.log lines (tracebacks included) with every URI's password removed."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


def quiet_tensorflow() -> None:
    """Drop TensorFlow's C++ and gRPC logs and Python warnings, for a command that keeps no
    log file; nothing with `--verbose`. Must run before TensorFlow is imported."""
    if _verbose:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    warnings.filterwarnings("ignore")


class _Tee(threading.Thread):
    """--verbose: copies what the libraries write into the pipe to the log and the terminal."""

    def __init__(self, read_fd: int, terminal_fd: int, sink: BinaryIO) -> None:
        super().__init__(name="mptfx-verbose-output", daemon=True)
        self.read_fd, self.terminal_fd, self.sink = read_fd, terminal_fd, sink
        self.lock = threading.Lock()

    def run(self) -> None:
        while chunk := os.read(self.read_fd, 65536):
            with self.lock:
                self.sink.write(chunk)
                self.sink.flush()
            with contextlib.suppress(OSError):
                os.write(self.terminal_fd, chunk)

    def switch_sink(self, sink: BinaryIO) -> BinaryIO:
        """Write to `sink` from now on; returns the previous sink."""
        with self.lock:
            previous, self.sink = self.sink, sink
        return previous


class LibraryOutput:
    """While open, descriptors 1 and 2, Python logging and warnings go to a sink: first a
    nameless temporary file, then (`move_to`) a log file that starts with what was held.
    `console` is the terminal, for our own lines. Open it with `library_output`."""

    def __init__(self, console_fd: int, verbose: bool) -> None:
        self.verbose = verbose
        self.log_path: Path | None = None
        sys.stdout.flush()
        sys.stderr.flush()
        self._terminal = {fd: os.dup(fd) for fd in (1, 2)}
        self.console: TextIO = os.fdopen(os.dup(self._terminal[console_fd]), "w", buffering=1)
        self._sink: BinaryIO = tempfile.TemporaryFile(prefix="mptfx-output-")
        self._tee: _Tee | None = None
        if verbose:  # both descriptors feed a pipe the copier reads
            read_fd, write_fd = os.pipe()
            self._tee = _Tee(read_fd, self._terminal[2], self._sink)
            self._tee.start()
            self._redirect(write_fd)
            os.close(write_fd)
        else:
            self._redirect(self._sink.fileno())
        root = logging.getLogger()
        self._previous_logging = list(root.handlers), root.level
        # Writes to descriptor 2 itself, so the records follow it into the sink.
        handler = logging.StreamHandler(open(2, "w", buffering=1, closefd=False))
        handler.setFormatter(_RedactingFormatter(_LOG_FORMAT))
        root.handlers = [handler]
        root.setLevel(logging.INFO)
        logging.captureWarnings(True)

    @staticmethod
    def _redirect(fd: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for target in (1, 2):
            os.dup2(fd, target)

    def move_to(self, log_path: Path) -> None:
        """From now on write to `log_path` (appended), after what was held so far."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")
        held = self._tee.switch_sink(log) if self._tee else self._sink
        if not self._tee:
            self._redirect(log.fileno())
        held.seek(0)
        shutil.copyfileobj(held, log)
        log.flush()
        held.close()
        self._sink, self.log_path = log, log_path

    def close(self) -> None:
        """Give the terminal its descriptors back; the log file keeps everything."""
        sys.stdout.flush()
        sys.stderr.flush()
        root = logging.getLogger()
        for handler in root.handlers:
            handler.flush()
        root.handlers, level = self._previous_logging
        root.setLevel(level)
        logging.captureWarnings(False)
        for fd, original in self._terminal.items():
            os.dup2(original, fd)  # also closes the pipe's write end the descriptors held
            os.close(original)
        if self._tee is not None:
            self._tee.join(_DRAIN_SECONDS)
            os.close(self._tee.read_fd)
        self._sink.close()
        self.console.close()


@contextlib.contextmanager
def library_output(console_fd: int) -> Iterator[LibraryOutput]:
    """Hold the libraries' output (see LibraryOutput) until `move_to` names its log file;
    what was held is dropped if the command stops before (shown when `--verbose`).
    `console_fd`: where our own lines go (1 stdout, 2 stderr)."""
    output = LibraryOutput(console_fd, _verbose)
    try:
        yield output
    finally:
        output.close()


@contextlib.contextmanager
def library_output_to(log_path: Path, console_fd: int) -> Iterator[TextIO]:
    """Send everything the libraries print (Python logging and warnings, Keras progress,
    TensorFlow's C++ messages on descriptors 1 and 2) to `log_path`; yield a stream to the
    terminal for our own lines. Descriptors are restored on the way out, also on errors."""
    with library_output(console_fd) as output:
        output.move_to(log_path)
        yield output.console
