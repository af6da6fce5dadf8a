"""`mptfx predict`: the served model's classes for new images, one row per input.

    mptfx predict INPUT... [--files-from LIST] [--workspace DIR] [--model NAME]
                  [--version N | --label L] [--tflite VARIANT]
                  [--format csv|jsonl] [--output FILE] [--top-k K] [--batch-size N]

INPUT is an image file, a folder (walked in sorted order) or a TFRecord file of tf.Examples
(components/predict/sources.py). The model is what the workspace serves: the `stable`
version in `<serving_dir>/models.config` unless `--version` or `--label` says otherwise, as
a SavedModel, or its published TF Lite `--tflite` variant. Rows go to stdout (or
`--output`) as they are answered; the progress line and the last line go to stderr. Exit
codes (components/errors.py): 0 every input predicted (or the reader of stdout stopped
early, as `| head` does), 5 some inputs had no prediction (their rows say why), 2 usage
(a missing input, no served model, an unknown label, version or variant), 130
interrupted. Nothing heavy is imported until the command runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from components.errors import EXIT_OK, EXIT_SOME_INPUTS_FAILED, UsageError

DESCRIPTION = (
    "Classify image files, folders of them or TFRecord files of tf.Examples with the model "
    "the workspace serves (the stable version, or --version/--label; --tflite for a TF Lite "
    "variant). One row per input to stdout or --output; an input that cannot be read is a "
    "row with its reason. Exit 0: all predicted; 5: some rows are errors; 2: usage.")
FORMATS = ("csv", "jsonl")
TFLITE_VARIANTS = ("fp32", "fp16", "dynamic_int8", "int8")
_PROGRESS_AFTER_SECONDS = 2.0
_PROGRESS_EVERY_SECONDS = 0.5


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a positive integer. Received: {text!r}")
    return int(text)


def register(commands: Any) -> None:
    """Add `predict` to the `mptfx` argparse tree."""
    parser = commands.add_parser(
        "predict", help="classify new images with the served model (CSV or JSON Lines)",
        description=DESCRIPTION)
    parser.add_argument("inputs", nargs="*", metavar="INPUT",
                        help="image files, folders or TFRecord files of tf.Examples")
    parser.add_argument("--files-from", metavar="LIST",
                        help="also read the paths listed in LIST, one per line ('-': stdin)")
    parser.add_argument("--workspace", default="workspace",
                        help="workspace folder (default ./workspace)")
    parser.add_argument("--config", help="YAML config, read for pusher.serving_dir "
                        "(default: configs/local.yaml when present)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override one config key, e.g. --set pusher.serving_dir=/srv")
    parser.add_argument("--model", help="the served model, when the workspace serves several")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--version", type=_positive, metavar="N", help="this pushed version")
    which.add_argument("--label", metavar="L",
                       help="the version this models.config label points at (default stable)")
    parser.add_argument("--tflite", choices=TFLITE_VARIANTS, metavar="VARIANT",
                        help=f"run this published TF Lite variant ({', '.join(TFLITE_VARIANTS)}) "
                        "instead of the SavedModel")
    parser.add_argument("--format", choices=FORMATS, default="csv",
                        help="csv (default) or jsonl")
    parser.add_argument("--output", metavar="FILE", help="write the rows here (default stdout)")
    parser.add_argument("--top-k", type=_positive, default=1, metavar="K",
                        help="the K most likely classes of each input (default 1)")
    parser.add_argument("--batch-size", type=_positive, default=64, metavar="N",
                        help="images per model call (default 64)")
    parser.set_defaults(handler=command_predict)


class Progress:
    """One line on the terminal (stderr, and only when it is one), redrawn at most every
    half second once the run has taken two: counts and rate, never in the rows' stream."""

    def __init__(self, stream: TextIO, total: int | None) -> None:
        self.stream = stream
        self.total = total
        self.enabled = stream.isatty()
        self.started = time.monotonic()
        self._drawn = 0.0
        self.done = self.failed = 0

    def count(self, failed: bool) -> None:
        """One more row; redraw when it is time."""
        self.done += 1
        self.failed += failed
        now = time.monotonic()
        if self.enabled and now - self.started >= _PROGRESS_AFTER_SECONDS \
                and now - self._drawn >= _PROGRESS_EVERY_SECONDS:
            self._drawn = now
            of = f" of {self.total:,}" if self.total else ""
            self.stream.write(f"\rmptfx predict: {self.done:,}{of} inputs, {self.failed:,} "
                              f"without a prediction, {self.rate():,.0f} img/s ")
            self.stream.flush()

    def rate(self) -> float:
        """Inputs per second so far."""
        return self.done / max(time.monotonic() - self.started, 1e-9)

    def close(self) -> None:
        """Clear the line, if one was drawn."""
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()


def _choose(args: argparse.Namespace) -> tuple[Any, Any]:
    """The version to ask and its predictor, or UsageError naming what is there."""
    from components.predict.served import ModelChoiceError, choose_version, open_predictor
    from components.serving.models_config import ModelsConfigError
    from pipelines.config import ConfigError, load_config
    from pipelines.workspace import Workspace

    try:
        config = load_config(args.config, args.set or [])
    except ConfigError as error:
        raise UsageError(str(error)) from None
    workspace = Workspace(Path(args.workspace).resolve())
    serving_dir = Path(config.pusher.serving_dir or workspace.root / "serving")
    try:
        choice = choose_version(serving_dir, args.model, args.version, args.label,
                                preferred=config.pusher.model_name)
        return choice, open_predictor(choice, workspace.tflite_dir(choice.model), args.tflite)
    except (ModelChoiceError, ModelsConfigError) as error:
        raise UsageError(f"predict: {error}") from None


def _write_rows(args: argparse.Namespace, sources: list, predictor: Any, out: TextIO,
                progress: Progress) -> None:
    from components.predict.run import RowWriter, predict_rows

    writer = RowWriter(out, args.format, min(args.top_k, len(predictor.label_names)))
    batch_rows = 0
    for row in predict_rows(sources, predictor, args.batch_size, args.top_k):
        writer.write(row)
        progress.count(row.error is not None)
        batch_rows += 1
        if batch_rows >= args.batch_size:  # the rows of a batch reach a pipe together
            out.flush()
            batch_rows = 0
    out.flush()


def command_predict(args: argparse.Namespace) -> int:
    """`mptfx predict`: rows to stdout or --output, one line on stderr, the exit code."""
    from pipelines.console import quiet_tensorflow

    quiet_tensorflow()
    from components.predict.sources import InputError, plan_sources

    try:
        sources = plan_sources(args.inputs, args.files_from)
    except InputError as error:
        raise UsageError(f"predict: {error}") from None
    _, predictor = _choose(args)
    for note in predictor.notes:
        print(f"mptfx predict: note: {note}", file=sys.stderr)
    known = [s.count for s in sources]
    progress = Progress(sys.stderr, sum(known) if None not in known else None)
    try:
        out = open(args.output, "w", encoding="utf-8", newline="") if args.output else sys.stdout
    except OSError as error:
        raise UsageError(f"predict: --output {args.output}: {error.strerror}") from None
    try:
        _write_rows(args, sources, predictor, out, progress)
    except BrokenPipeError:
        # The reader stopped early (`| head`): it has what it wanted; no traceback, and no
        # second error when Python flushes stdout on its way out.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    finally:
        progress.close()
        if out is not sys.stdout:
            out.close()
    print(f"mptfx predict: {progress.done:,} inputs, {progress.done - progress.failed:,} "
          f"predicted, {progress.failed:,} without a prediction (the rows say why); "
          f"{progress.rate():,.0f} img/s by {predictor.description}"
          f"{f' -> {args.output}' if args.output else ''}", file=sys.stderr)
    return EXIT_SOME_INPUTS_FAILED if progress.failed else EXIT_OK
