"""`mptfx monitor` and `mptfx request-logger`: from served traffic back to training.

    mptfx request-logger [--upstream URL] [--port N]     the serving pod's logging sidecar
    mptfx monitor [--since 24h] [--until TIME] [--json] [--export-images DIR]
                  [--retrain-on-drift [--runner ...]]

`request-logger` forwards TF Serving's REST API and writes a sampled share of the predict
calls (`serving.request_log.sampling_rate`) as PredictionLogs to the request log, one
folder per day (components/monitor/proxy.py). It runs until it is stopped (SIGTERM or
Ctrl-C), which is what a sidecar is for; nothing else here starts a process.

`monitor` reads a window of the request log, compares each served version's traffic with
that version's reference (its eval split: drift; its training data: skew) with TFDV's
comparators, writes a report (report.md, report.json, distributions.png) under
`monitor.report_dir`, logs the measures on the version's MLflow run, and exits

    0  no drift, or not enough traffic to tell (fewer than monitor.min_images images)
    2  bad command line or config, no request log folder (one line naming it)
    4  drift or skew: the line names the features that moved (components/errors.py)
    1  --retrain-on-drift started a retraining that failed

With `--retrain-on-drift` a drift starts the retraining `mptfx retrain` starts (same lock,
runner and spans); summary.json and the MLflow run record `trigger: drift` and the
features. Without a new span it only reports, unless `monitor.retrain_without_new_data`.
Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from components.errors import EXIT_DRIFT, EXIT_OK, UsageError

_DURATION = re.compile(r"^(?P<amount>\d+(?:\.\d+)?)(?P<unit>[mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}
DEFAULT_PROXY_PORT = 8511


def parse_time(text: str, now: dt.datetime, option: str) -> dt.datetime:
    """`24h`, `90m`, `7d` (before `now`) or an ISO 8601 time (UTC unless it says otherwise)."""
    match = _DURATION.match(text.strip())
    if match:
        return now - dt.timedelta(**{_UNITS[match["unit"]]: float(match["amount"])})
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option} expects a duration such as 24h, 90m, 7d or an ISO time "
                         f"such as 2026-12-01T00:00:00Z. Received: {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _load(args: argparse.Namespace) -> Any:
    from pipelines.config import ConfigError, load_config

    try:
        # Named after the data as the runs were (`--data` of monitor), so the model matches.
        return load_config(args.config, args.set or [], data=getattr(args, "data", None))
    except ConfigError as error:
        raise UsageError(str(error)) from None


def _serving_root(config: Any, workspace_root: Path) -> Path:
    return Path(config.pusher.serving_dir or workspace_root / "serving")


# -- mptfx request-logger ---------------------------------------------------------------------


def command_request_logger(args: argparse.Namespace) -> int:
    """Proxy TF Serving's REST API, logging sampled predict calls, until stopped."""
    from pipelines.console import quiet_tensorflow

    quiet_tensorflow()
    config = _load(args)
    workspace_root = Path(args.workspace).resolve()
    settings = config.serving.request_log
    log_dir = settings.folder(workspace_root)
    from components.monitor.proxy import RequestLogger

    try:
        logger = RequestLogger(args.upstream, _serving_root(config, workspace_root), log_dir,
                               settings.sampling_rate)
        server = logger.make_server(args.host, args.port)
    except (ValueError, OSError) as error:
        raise UsageError(f"request-logger: {error}") from None
    def shut_down(signum: int, frame: Any) -> None:
        # serve_forever runs in this thread; shutdown() waits for it, so from another one.
        threading.Thread(target=server.shutdown, daemon=True).start()

    previous = signal.signal(signal.SIGTERM, shut_down)
    print(f"mptfx request-logger: http://{args.host}:{server.server_port} -> {args.upstream}, "
          f"logging {settings.sampling_rate:.0%} of predict calls to "
          f"{log_dir}/<model>/<YYYY-MM-DD>/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
        logger.writer.close()
    print(f"mptfx request-logger: stopped; {logger.logged} predict calls logged", flush=True)
    return EXIT_OK


# -- mptfx monitor ----------------------------------------------------------------------------


def _report_lines(judgement: Any) -> list[str]:
    from components.monitor.judge import DRIFTED

    lines = []
    for verdict in judgement.verdicts:
        head = f"mptfx monitor: version {verdict.version}: {verdict.images} images"
        if verdict.status == DRIFTED:
            parts = []
            for comparison in ("drift", "skew"):
                moved = [m for m in _moved_measurements(verdict) if m.comparison == comparison]
                if moved:
                    parts.append(f"{comparison} in " + ", ".join(_describe(m) for m in moved))
            lines.append(f"{head}, {'; '.join(parts)}")
        elif verdict.reason:
            lines.append(f"{head}, {verdict.status} ({verdict.reason})")
        else:
            lines.append(f"{head}, {verdict.status}")
    return lines


def _moved_measurements(verdict: Any) -> list[Any]:
    moved = [m for m in verdict.comparison.measurements if m.moved]
    return sorted(moved, key=lambda m: -m.ratio)


_SHORT_MEASURES = {"jensen_shannon_divergence": "JSD", "l_infinity": "L-inf"}


def _describe(measurement: Any) -> str:
    short = _SHORT_MEASURES.get(measurement.measure, measurement.measure)
    return f"{measurement.feature} ({short} {measurement.value:.2f} > {measurement.threshold:g})"


def _record_in_mlflow(config: Any, workspace_root: Path, judgement: Any, report: Path) -> None:
    from components import tracking
    from components.core.text import one_line
    from components.tracking.monitoring import record_monitoring

    # exit 2 if required
    store = tracking.resolve_store(config.tracking, config.run_names, workspace_root,
                                   sys.stderr)
    try:
        runs = record_monitoring(store, config.pusher.model_name, judgement.verdicts,
                                 judgement.until, str(report))
    except Exception as error:  # the judgement stands without its MLflow record
        print(f"mptfx monitor: warning: MLflow record failed ({store.uri}): {one_line(error)}",
              file=sys.stderr)
        return
    for version, run_id in runs.items():
        if run_id is None:
            print(f"mptfx monitor: warning: no MLflow run trained version {version} in "
                  f"{store.experiment!r}; its measures are only in {report}", file=sys.stderr)


def _retrain_on_drift(args: argparse.Namespace, config: Any, judgement: Any,
                      report: Path) -> int:
    """Start the retraining; returns its exit code (0 when it did not need to train)."""
    from components.monitor.judge import DRIFTED
    from pipelines.retrain import start_retrain

    trigger = {"kind": "drift", "features": judgement.moved(), "report": str(report),
               "versions": [v.version for v in judgement.verdicts if v.status == DRIFTED]}
    retrain_args = argparse.Namespace(**vars(args))
    retrain_args.command, retrain_args.json = "retrain", False
    if args.runner == "kubernetes":
        retrain_args.workspace = "workspace"  # the cluster's is kubernetes.workspace
    same_data = config.monitor.retrain_without_new_data
    outcome = start_retrain(retrain_args, trigger=trigger, same_data=same_data)
    if outcome.skipped:
        print(f"mptfx monitor: drift reported, not retrained: {outcome.skipped} (set "
              f"monitor.retrain_without_new_data=true to retrain on the same data)")
    return outcome.code


def _export_images(folder: str, log_dir: Path, model_name: str, since: dt.datetime,
                   until: dt.datetime, serving_root: Path) -> None:
    from components.monitor.reference import ReferenceMissing, read_reference
    from components.monitor.request_log import read_window
    from components.monitor.traffic import export_images, group_by_version

    written = 0
    window = read_window(log_dir, model_name, since, until)
    for version, logs in group_by_version(window.records).items():
        try:
            label_names = read_reference(serving_root / model_name / str(version)).label_names
        except ReferenceMissing:
            label_names = []  # the logged class_name still sorts them
        written += export_images(logs, folder, label_names)
    print(f"mptfx monitor: {written} served images in {folder}/<predicted class>/; correct "
          f"the folders, then add them as the next span")


def command_monitor(args: argparse.Namespace) -> int:
    """Judge the request log's window; report, record, exit 0 or 3 (see the module doc)."""
    from pipelines.console import quiet_tensorflow

    quiet_tensorflow()
    config = _load(args)
    workspace_root = Path(args.workspace).resolve()
    now = dt.datetime.now(dt.timezone.utc)
    until = parse_time(args.until, now, "--until") if args.until else now
    since = parse_time(args.since, until, "--since")
    if since >= until:
        raise UsageError(f"--since ({since.isoformat()}) must be before --until "
                         f"({until.isoformat()})")
    log_dir = config.serving.request_log.folder(workspace_root)
    if not log_dir.is_dir():
        raise UsageError(f"no request log at {log_dir} (serving.request_log.dir): is "
                         f"`mptfx request-logger` in front of TF Serving?")
    from components.monitor.judge import judge_traffic
    from components.monitor.report import to_dict, write_report

    model_name = config.pusher.model_name
    judgement = judge_traffic(log_dir, _serving_root(config, workspace_root), model_name,
                              since, until, config.monitor)
    for problem in judgement.problems:
        print(f"mptfx monitor: warning: skipped {problem}", file=sys.stderr)
    if args.export_images:
        _export_images(args.export_images, log_dir, model_name, since, until,
                       _serving_root(config, workspace_root))
    folder = config.monitor.reports_folder(workspace_root) / f"{until:%Y%m%dT%H%M%SZ}"
    paths = write_report(judgement, folder)
    out = sys.stderr if args.json else sys.stdout
    if not judgement.verdicts:
        print(f"mptfx monitor: not enough traffic: no logged predictions of {model_name} "
              f"from {since:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC "
              f"({len(judgement.files)} files in {log_dir / model_name})", file=out)
    for line in _report_lines(judgement):
        print(line, file=out)
    print(f"mptfx monitor: report {paths['markdown']}", file=out)
    if any(v.comparison is not None for v in judgement.verdicts):
        _record_in_mlflow(config, workspace_root, judgement, paths["markdown"])
    if args.json:
        print(json.dumps(to_dict(judgement), indent=2))
    if not judgement.drifted:
        return EXIT_OK
    if args.retrain_on_drift:
        code = _retrain_on_drift(args, config, judgement, paths["markdown"])
        if code != EXIT_OK:
            return code
    return EXIT_DRIFT


def register(commands: Any) -> None:
    """Add `mptfx monitor` and `mptfx request-logger` to the CLI."""
    from pipelines.retrain import add_retrain_options

    monitor = commands.add_parser(
        "monitor", help="drift and skew of served traffic; retrain on drift (exit 4 = drift)",
        description="Judge a window of the request log against each served version's "
        "reference: exit 0 no drift (or not enough traffic), 4 drift or skew, 2 usage.")
    monitor.add_argument("--config", help="YAML config (default: configs/local.yaml when present)")
    monitor.add_argument("--set", action="append", metavar="KEY=VALUE",
                         help="override one config key, e.g. --set monitor.min_images=50")
    monitor.add_argument("--workspace", default="workspace",
                         help="workspace folder (default ./workspace)")
    monitor.add_argument("--since", default="24h",
                         help="window start: a duration before --until (24h, 90m, 7d) or an "
                         "ISO time (default 24h)")
    monitor.add_argument("--until", help="window end: an ISO time or a duration before now "
                         "(default now)")
    monitor.add_argument("--json", action="store_true", help="print report.json on stdout")
    monitor.add_argument("--export-images", metavar="DIR",
                         help="also write the window's logged images to DIR/<predicted "
                         "class>/, to label them into a new span")
    monitor.add_argument("--retrain-on-drift", action="store_true",
                         help="on drift, start the retraining `mptfx retrain` would start")
    monitor.add_argument("--data", help="the data the served model was trained on (it names "
                         "the model when the config does not); --retrain-on-drift retrains "
                         "on its new spans (default data.source)")
    add_retrain_options(monitor)
    monitor.set_defaults(handler=command_monitor)

    logger = commands.add_parser(
        "request-logger", help="the serving pod's sidecar: proxy TF Serving's REST API and log "
        "sampled predict calls for mptfx monitor")
    logger.add_argument("--config", help="YAML config (default: configs/local.yaml when present)")
    logger.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override one config key, e.g. "
                        "--set serving.request_log.sampling_rate=0.1")
    logger.add_argument("--workspace", default="workspace",
                        help="workspace folder: serving/ (models.config) and request_log/")
    logger.add_argument("--upstream", default="http://127.0.0.1:8501",
                        help="TF Serving's REST API (default http://127.0.0.1:8501)")
    logger.add_argument("--host", default="0.0.0.0", help="address to listen on")
    logger.add_argument("--port", type=int, default=DEFAULT_PROXY_PORT,
                        help=f"port to listen on (default {DEFAULT_PROXY_PORT}; 0 = any free)")
    logger.set_defaults(handler=command_request_logger)
