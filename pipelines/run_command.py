"""`mptfx run`: the command over `pipelines.api.run_pipeline`, with its lines and exit codes.

    exit_code = command_run(args)                         # mptfx run
    exit_code = command_run(args, planner=plan_retrain)   # mptfx retrain: skip or add a schema

`command_run` runs the pipeline through the Python API, prints one line per component and a
summary table (on stderr with `--json`, which prints summary.json on stdout). Exit codes: 0
the run completed (blessed or not) or the workspace is busy, 1 a component failed, 2 usage,
configuration or input-data error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from components.core.text import one_line
from components.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPELINE_FAILED, UsageError
from components.redact import redact_text
from components.run_summary import InfraSection, RunSummary
from pipelines.api import (
    Planner,
    RunInterrupted,
    WorkspaceInUse,
    log_path_of,
    run_pipeline,
)
from pipelines.workspace import new_run_id

__all__ = ["add_run_arguments", "command_run"]


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `mptfx run`, shared by the commands that run the pipeline."""
    parser.add_argument("--config", help="YAML config (default: configs/local.yaml when present)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override one config key, e.g. --set trainer.epochs=3 (repeatable)")
    parser.add_argument("--workspace", default="workspace",
                        help="output folder (default ./workspace)")
    parser.add_argument("--data", help="image folder (one sub-folder per class), TFRecord "
                        "folder, or folder of span-<N> drops")
    parser.add_argument("--json", action="store_true", help="print summary.json on stdout")


def command_run(args: argparse.Namespace, planner: Planner | None = None) -> int:
    """`mptfx run`; other commands (retrain) reuse it with a planner.

    The API holds the workspace lock for the whole run: two runs in one workspace would
    share its sqlite ML Metadata and MLflow stores and its pipeline root. The second one
    exits 0 naming the holder, as `mptfx retrain` does (a cron job must not pile up
    failures).
    """
    run_id = new_run_id()
    console_fd = 2 if args.json else 1
    try:
        summary = run_pipeline(args.config, args.workspace, args.data, overrides=args.set or [],
                               planner=planner, run_id=run_id, console_fd=console_fd,
                               command=args.command)
    except WorkspaceInUse as busy:
        print(busy, file=sys.stderr if args.json else sys.stdout)
        if args.json:
            print(json.dumps({"status": "skipped", "reason": str(busy)}, indent=2))
        return EXIT_OK
    except RunInterrupted as interrupted:
        _report(interrupted.summary, args.json)
        return EXIT_INTERRUPTED
    except UsageError:
        raise
    except Exception as crash:  # outside any component; its traceback is in the log
        return _report_crash(crash, log_path_of(args.workspace, run_id))
    _report(summary, args.json)
    if summary.status == "failed":
        print(f"mptfx: error: {summary.error} (full log: {summary.log_path})", file=sys.stderr)
        return EXIT_PIPELINE_FAILED
    return EXIT_OK


def _report(summary: RunSummary, as_json: bool) -> None:
    if summary.status != "skipped":
        _print_summary(summary, sys.stderr if as_json else sys.stdout)
    if as_json:
        print(summary.to_json())


def _report_crash(crash: Exception, log_path: Path) -> int:
    """One line for an error raised outside the components: a path the OS refused is the
    user's to fix (exit 2, naming it); anything else is a failed run (exit 1)."""
    if isinstance(crash, OSError) and crash.filename:
        reason = crash.strerror or one_line(crash)
        raise UsageError(f"cannot use {crash.filename}: {reason} (full log: {log_path})")
    print(f"mptfx: error: {redact_text(one_line(crash))} (full log: {log_path})",
          file=sys.stderr)
    return EXIT_PIPELINE_FAILED


def describe_infra(infra: InfraSection) -> str:
    """The InfraValidator's line: the verdict, load seconds, latencies and memory."""
    if not infra.checked:
        return infra.reason or "not checked"
    measured = []
    if infra.load_seconds is not None:
        measured.append(f"loaded in {infra.load_seconds:.2f} s")
    if infra.p99_ms is not None:
        measured.append(f"p50 {infra.p50_ms:.1f} ms, p99 {infra.p99_ms:.1f} ms, "
                        f"{infra.requests} requests answered")
    if infra.peak_rss_mb is not None:
        measured.append(f"peak RSS {infra.peak_rss_mb:.0f} MiB of {infra.memory_limit}")
    verdict = "BLESSED" if infra.blessed else f"NOT blessed: {infra.reason}"
    return f"{verdict} ({infra.server}{': ' if measured else ''}{', '.join(measured)})"


def _input_fact(record: dict | None) -> list[tuple[str, str]]:
    """The Trainer's input-bound sentence, or the share of the step spent waiting."""
    if not record or record.get("wait_share") is None:
        return []
    if record.get("advice"):
        return [("input", record["advice"])]
    alone = record.get("model_steps_per_sec")
    return [("input", f"{100 * record['wait_share']:.0f} % of the step waited for input"
             + (f" (model alone {alone:.0f} steps/s, training {record['steps_per_sec']:.0f})"
                if alone and record.get("steps_per_sec") else ""))]


def _distill_fact(record: dict | None) -> list[tuple[str, str]]:
    """Who taught the model and how teacher and student scored on the same eval images."""
    if not record or record.get("teacher_accuracy") is None:
        return []
    teacher, student = record["teacher_accuracy"], record["student_accuracy"]
    line = (f"from {record.get('teacher_model')} ({record.get('teacher')}): teacher "
            f"{teacher:.4f}, student {student:.4f} on the same {record.get('eval_examples')} "
            f"eval images (T {record.get('temperature'):g}, alpha {record.get('alpha'):g})")
    if student > teacher:
        line += ("; the student outscores its teacher, so the teacher has little to teach: "
                 "compare with the student trained alone (docs/guide/distillation.md)")
    return [("distill", line)]


def _print_summary(summary: RunSummary, out: TextIO) -> None:
    rows = [("component", "status", "seconds")]
    for name, info in summary.components.items():
        seconds = info.seconds
        rows.append((name, info.status, "-" if seconds is None else f"{seconds:.1f}"))
    width = max(len(row[0]) for row in rows)
    print("", file=out)
    for row in rows:
        print(f"  {row[0]:<{width}}  {row[1]:<10} {row[2]:>8}", file=out)
    trainer, evaluation, pushed, data = (summary.trainer, summary.eval, summary.pushed,
                                         summary.data)
    quarantined = data.quarantined or 0
    facts = [
        ("run", f"{summary.run_id}  {summary.status}  {summary.wall_seconds or 0:.1f} s"),
        ("data", f"{'?' if data.images is None else data.images} images, "
                 f"{quarantined} quarantined"),
    ]
    if trainer.present() and trainer.model_extra and trainer.model_extra.get("model_reason"):
        extra = trainer.model_extra
        size = "x".join(str(v) for v in extra.get("input_size") or [])
        facts.append(("model", f"{trainer.model} at {size} ({extra['model_reason']}; "
                      f"{extra.get('input_size_reason')})"))
    if trainer.present():
        xla = "on" if trainer.xla else "off"
        facts.append(("trainer", f"{trainer.model} {trainer.precision} "
                      f"({trainer.precision_reason}), strategy {trainer.strategy}, "
                      f"xla {xla}, {trainer.epochs} epochs, "
                      f"{trainer.images_per_sec or 0:.0f} img/s"))
        facts.extend(_input_fact(trainer.input_bound))
        facts.extend(_distill_fact(trainer.distill))
    if evaluation.present():
        verdict = "BLESSED" if evaluation.blessed else "NOT blessed: " + "; ".join(
            evaluation.why_not_blessed or [])
        metric, value = evaluation.headline()
        facts.append(("eval", f"{metric} {value}  {verdict}"))
    if summary.infra.present():
        facts.append(("infra", describe_infra(summary.infra)))
    if pushed.present():
        facts.append(("pushed", f"version {pushed.version} -> {pushed.path}"
                      if pushed.pushed else "nothing pushed"))
    for variant, info in summary.tflite.items():
        if isinstance(info, str):
            facts.append(("tflite", f"{variant}: {info}"))
        else:
            facts.append((f"tflite {variant}", f"{info.bytes} bytes, agreement "
                          f"{info.agreement}, published: {info.path or 'no'}"))
    if summary.error:
        facts.append(("error", summary.error))
    if summary.report_path:
        facts.append(("report", summary.report_path))
    facts.append(("summary", summary.summary_path))
    print("", file=out)
    for key, value in facts:
        print(f"  {key + ':':<13} {value}", file=out)
