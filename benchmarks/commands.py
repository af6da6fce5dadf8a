"""The `mptfx bench` sub-command.

    mptfx bench [--quick] [--workspace DIR] [--models A,B] [--model-file PATH] [--precisions P,Q]
                [--xla off,on]
                [--sections S,T] [--memory-cap MB] [--batch-size N] [--input-shape 64x64x1]
                [--windows N] [--window-seconds S] [--warmup-seconds S] [--max-batch N]
                [--write-docs PAGE]

Writes `<workspace>/bench/results.{json,md}`, `throughput.png` and `memory.png` (and, with
--write-docs, the generated docs/PERFORMANCE.md). Imports here stay light (no TensorFlow)
so `mptfx --help` is instant. The lab (tools/lab/__main__.py) reuses `add_arguments` and
`bench_options` with its own sections.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from components.errors import UsageError

_PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
_XLA_VALUES = {"off": False, "on": True}


def _list(text: str, allowed: tuple[str, ...] | None, flag: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values:
        raise UsageError(f"{flag} needs at least one value. Received: {text!r}")
    if allowed is not None:
        unknown = [v for v in values if v not in allowed]
        if unknown:
            raise UsageError(f"{flag}: unknown value(s) {unknown}; choose from {list(allowed)}")
    return values


def _shape(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        shape = tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        shape = ()
    if len(shape) not in (3, 4) or min(shape) < 1:
        raise UsageError(f"--input-shape must look like 64x64x1 or 32x32x32x1. Received: {text!r}")
    return shape


def _model_file(args: argparse.Namespace) -> dict[str, str]:
    """--model-file/--model-builder/--model-task, the file checked to exist (exit 2)."""
    if not args.model_file:
        return {}
    import os

    if not args.model_file.endswith(".py") or (
            "://" not in args.model_file and not os.path.isfile(args.model_file)):
        raise UsageError(f"--model-file {args.model_file}: not an existing .py file")
    return {"model_file": os.path.abspath(args.model_file) if "://" not in args.model_file
            else args.model_file, "model_builder": args.model_builder,
            "model_task": args.model_task}


def bench_options(args: argparse.Namespace, names: tuple[str, ...], program: str = "mptfx"):
    """The parsed command line as `BenchOptions`, its --sections checked against `names`
    (exit 2 on a bad value)."""
    from benchmarks.options import BenchOptions

    sections = names if args.sections == "all" else _list(args.sections, names, "--sections")
    for flag, value in (("--batch-size", args.batch_size), ("--windows", args.windows),
                        ("--max-batch", args.max_batch), ("--memory-cap", args.memory_cap)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be positive. Received: {value}")
    return BenchOptions(
        workspace=args.workspace,
        quick=args.quick,
        sections=tuple(s for s in names if s in sections),
        models=_list(args.models, None, "--models") if args.models else None,
        precisions=_list(args.precisions, _PRECISIONS, "--precisions"),
        xla=tuple(_XLA_VALUES[v] for v in _list(args.xla, tuple(_XLA_VALUES), "--xla")),
        batch_size=args.batch_size,
        input_shape=_shape(args.input_shape),
        windows=args.windows,
        window_seconds=args.window_seconds,
        warmup_seconds=args.warmup_seconds,
        memory_cap_mb=float(args.memory_cap),
        max_batch=args.max_batch,
        **_model_file(args),
        command=_command_line(program),
    )


def _command_line(program: str) -> str:
    argv = sys.argv[1:]
    if program == "mptfx" and argv[:1] != ["bench"]:
        argv = ["bench"]  # called from Python, not from the console script
    return f"{program} {shlex.join(argv)}".strip()


def _command_bench(args: argparse.Namespace) -> int:
    from benchmarks.plan import SECTIONS
    from benchmarks.runner import run_bench

    return run_bench(bench_options(args, SECTIONS), write_docs=args.write_docs)


def register(commands: argparse._SubParsersAction) -> None:
    """Adds `bench` to the `mptfx` sub-commands."""
    from benchmarks.plan import SECTIONS

    bench = commands.add_parser(
        "bench",
        help="measure what to train with here: precision x XLA, auto's measured choice, "
             "largest batch, input pipeline, photo-scale data, predictions",
        description="Reproducible measurements on this machine's CPU or GPU; results go to "
                    "<workspace>/bench/ as results.md, results.json and PNG charts.",
    )
    add_arguments(bench, SECTIONS)
    bench.set_defaults(handler=_command_bench)


def add_arguments(bench: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """The bench's options on `bench`, with `names` as the --sections choices."""
    bench.add_argument("--quick", action="store_true",
                       help="a few-minute subset: small sizes, 3 windows, seed model batch search")
    bench.add_argument("--workspace", default="workspace",
                       help="output folder (default ./workspace); results in <workspace>/bench")
    bench.add_argument("--models", help="comma-separated registry names (default: all registered)")
    bench.add_argument("--model-file", metavar="PATH",
                       help="your own model file (like model.module_file); benchmarked "
                            "instead of the registered models, or beside --models")
    bench.add_argument("--model-builder", default="build_model",
                       help="the builder function in --model-file (default build_model)")
    bench.add_argument("--model-task", default="classification",
                       choices=["classification", "segmentation"],
                       help="--model-file's task (default classification)")
    bench.add_argument("--precisions", default=",".join(_PRECISIONS),
                       help="comma-separated dtype policies (default: all three)")
    bench.add_argument("--xla", default="off,on", help="off, on or off,on (default)")
    bench.add_argument("--sections", default="all",
                       help=f"comma-separated: {', '.join(names)} (default: all)")
    bench.add_argument("--memory-cap", type=int, default=2048, metavar="MB",
                       help="CPU only: the largest-batch search's limit on a probe's peak "
                            "RSS (default 2048 MB; GPUs use their own memory)")
    bench.add_argument("--batch-size", type=int, help="override every model's batch size")
    bench.add_argument("--input-shape", help="override every model's input, e.g. 64x64x1")
    bench.add_argument("--windows", type=int, help="timed windows per cell")
    bench.add_argument("--window-seconds", type=float, help="target length of a timed window")
    bench.add_argument("--warmup-seconds", type=float, help="untimed steps before the windows")
    bench.add_argument("--max-batch", type=int, help="largest batch the search may probe")
    bench.add_argument("--write-docs", metavar="PAGE",
                       help="also write the run's figures as a generated page, e.g. "
                            "docs/PERFORMANCE.md (command, date, machine and CPU flags)")
