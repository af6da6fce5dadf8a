"""The `mptfx` command: argument parsing and dispatch to the sub-commands.

    mptfx run [--config FILE] [--set KEY=VALUE ...] [--workspace DIR] [--data DIR] [--json]

Exit codes (components/errors.py): 0 the run completed (blessed or not), 1 a pipeline
component failed, 2 usage, configuration or input-data error (the message names the key,
file or folder), 130 interrupted.

`run` itself is pipelines/run_command.py; every other sub-command lives in a command module
that adds itself to the tree with `register(commands)`. Those modules import nothing heavy
(no TensorFlow) at import time, so `mptfx --help` is instant, and nothing from this module:
the shared pieces are in run_command, console, data_source and workspace.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Any

from benchmarks import commands as bench_commands
from components.errors import EXIT_INTERRUPTED, EXIT_USAGE, UsageError
from components.redact import redact_text
from pipelines import (
    doctor,
    k8s_commands,
    monitor_command,
    predict_command,
    retrain,
    serve_commands,
    sweep,
    tracking_commands,
)
from pipelines.console import set_verbose
from pipelines.os_errors import describe_os_error
from pipelines.run_command import add_run_arguments, command_run

# In the order of `mptfx --help`.
COMMAND_MODULES = [retrain, k8s_commands, tracking_commands, sweep, bench_commands, doctor,
                   serve_commands, predict_command, monitor_command]


class _Parser(argparse.ArgumentParser):
    """A parser of the `mptfx` tree: each takes `--verbose` (sub-commands' parsers are made
    of the parent's class). No default, so a `--verbose` given before a sub-command's name
    is not reset by the sub-command's parser."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                          help="also show on the terminal what TensorFlow, TFX, Beam and "
                          "MLflow print (else it goes only to the command's log file, if it "
                          "keeps one)")


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of `mptfx` and its sub-commands."""
    parser = _Parser(
        prog="mptfx",
        description="Mixed-precision TFX pipeline: ingest, train, evaluate, publish.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the whole pipeline locally")
    add_run_arguments(run)
    run.set_defaults(handler=command_run)
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `mptfx` console script; returns the process exit code. Every
    command runs in this process and leaves nothing running after it."""
    return dispatch(sys.argv[1:] if argv is None else argv)


def dispatch(argv: list[str]) -> int:
    """Parse `argv` and run its sub-command in this process."""
    args = build_parser().parse_args(argv)
    verbose = getattr(args, "verbose", False)
    set_verbose(verbose)
    try:
        _refuse_blank_values(args, argv)
        return args.handler(args)
    except UsageError as error:
        print(f"mptfx: error: {redact_text(str(error))}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:  # a path the OS refused, or a full disk: name where
        if verbose:
            traceback.print_exc()
        where = describe_os_error(error, _command_words(args))
        print(f"mptfx: error: {redact_text(where)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("mptfx: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _command_words(args: argparse.Namespace) -> str:
    """The command as typed, without its options: `serve render`, `k8s compile`."""
    words = [args.command] + [value for name, value in vars(args).items()
                              if name.endswith("_command") and isinstance(value, str)]
    return " ".join(words)


def _refuse_blank_values(args: argparse.Namespace, argv: list[str]) -> None:
    """An option given an empty or blank value is an error before anything runs: `--data
    "$DATA_DIR"` with the variable unset must not mean the digits, nor `--workspace ""` the
    current folder. (No option's default is blank, so a blank value was typed.)"""
    for name, value in vars(args).items():
        if isinstance(value, str) and not value.strip():
            option = f"--{name.replace('_', '-')}"
            shown = option if any(arg.split("=")[0] == option for arg in argv) else name.upper()
            raise UsageError(f"{shown} is empty: give a value, or leave it out for the default")


if __name__ == "__main__":
    sys.exit(main())
