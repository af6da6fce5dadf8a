"""`mptfx serve rollout` and `mptfx serve sidecar`: the automatic canary analysis.

    mptfx serve rollout [--if-canary] [--in-cluster]   step the canary up, promote or abort
    mptfx serve sidecar --upstream URL                 count TF Serving's answers for Prometheus

`rollout` writes the HTTPRoute's weights into `<workspace>/k8s/serving-route.yaml` at each
step (`--in-cluster`: patches the HTTPRoute through the Kubernetes API too), judges the canary
with Prometheus (`serving.analysis`), and records every check in MLflow. Exit codes: 0
promoted (or, with --if-canary, no canary), 1 aborted, 2 nothing changed (no canary,
Prometheus unreachable, bad config), 3 gave up without a verdict (too little traffic).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from components.errors import EXIT_OK, UsageError
from pipelines.config import Config


def add_actions(actions: Any) -> None:
    """Add `rollout` and `sidecar` to the `mptfx serve` actions (the caller gives `rollout`
    the serve verbs' common options and handler)."""
    rollout = actions.add_parser(
        "rollout", help="step the canary's traffic through serving.analysis.steps; promote "
        "it when Prometheus says it is healthy, abort it when it is not")
    rollout.add_argument("--if-canary", action="store_true",
                         help="exit 0 when there is no canary (the CronJob's schedule)")
    rollout.add_argument("--in-cluster", action="store_true",
                         help="also patch the HTTPRoute through the Kubernetes API with the "
                         "pod's ServiceAccount")
    sidecar = actions.add_parser(
        "sidecar", help="reverse proxy in front of TF Serving's REST port that exports the "
        "predicted classes and confidences for Prometheus")
    sidecar.add_argument("--upstream", default="http://127.0.0.1:8501",
                         help="TF Serving's REST root (default http://127.0.0.1:8501)")
    sidecar.add_argument("--host", default="0.0.0.0", help="address to listen on")
    sidecar.add_argument("--port", type=int, default=8508, help="proxy port (default 8508)")
    sidecar.add_argument("--metrics-port", type=int, default=9108,
                         help="port of /metrics (default 9108)")
    sidecar.add_argument("--max-body-mb", type=float, default=64.0,
                         help="largest request body passed on (default 64 MB)")
    sidecar.set_defaults(handler=command_sidecar)


def command_sidecar(args: argparse.Namespace) -> int:
    """`mptfx serve sidecar`: serve until SIGTERM."""
    from components.serving.sidecar import run_sidecar

    def ready(port: int, metrics_port: int) -> None:
        print(f"mptfx serve sidecar: {args.host}:{port} -> {args.upstream}; metrics on "
              f"{args.host}:{metrics_port}/metrics", flush=True)

    try:
        run_sidecar(args.upstream, args.host, args.port, args.metrics_port, args.max_body_mb,
                    ready)
    except OSError as error:
        raise UsageError(f"serve sidecar: cannot listen on {args.host}:{args.port} or "
                         f":{args.metrics_port}: {error.strerror or error}") from None
    return EXIT_OK


def _route_writer(args: argparse.Namespace, config: Config):
    """The function that moves the canary weight: the rendered file, and the cluster's
    HTTPRoute with --in-cluster."""
    from pipelines.kubernetes.objects import write_manifests
    from pipelines.kubernetes.serving import ROUTE_FILE, ROUTE_HEADER, render_http_route

    route_path = Path(args.k8s_out or Path(args.workspace).resolve() / "k8s") / ROUTE_FILE
    patch = None
    if args.in_cluster:
        from pipelines.k8s_commands import make_clients
        from pipelines.kubernetes.route import patch_http_route

        custom = make_clients(in_cluster=True)[2]

        def patch(route: dict) -> None:
            patch_http_route(custom, route)

    def set_weight(weight: int) -> None:
        route = render_http_route(config, weight)
        if patch is not None:
            patch(route)
        write_manifests(route_path, [route], ROUTE_HEADER)

    return set_weight, route_path


def _recorder_factory(args: argparse.Namespace, config: Config, registry: Any):
    """MLflow records the rollout in the pipeline's experiment, beside its runs."""
    if registry.reader is None:
        return None
    from components.tracking.rollout_record import RolloutRun
    from components.tracking.store import LOCAL_ARTIFACTS_DIR, is_local_uri

    artifacts = None
    if is_local_uri(str(registry.client.tracking_uri)):
        artifacts = (Path(args.workspace).resolve() / LOCAL_ARTIFACTS_DIR).as_uri()

    def start(report: Any) -> Any:
        return RolloutRun.start(registry.client, config.tracking.experiment or
                                config.pipeline.name, report.model_name, report.canary,
                                report.stable, config.serving.analysis, artifacts)

    return start


def run_rollout_command(args: argparse.Namespace, config: Config, target: Any,
                        registry: Any) -> int:
    """`mptfx serve rollout`: lines on stdout, the verdict's line on stderr unless promoted."""
    from components.serving.prometheus import Prometheus
    from pipelines import rollout_verbs as rollout
    from pipelines.canary_rollout import PROMOTED, outcome_line, run_rollout

    settings = config.serving.analysis
    if args.if_canary and target.labels().canary is None:
        print(f"mptfx serve rollout: no canary in {target.config_path}: nothing to roll out")
        return EXIT_OK
    set_weight, route_path = _route_writer(args, config)
    prometheus = Prometheus(settings.prometheus_url, settings.query_timeout_seconds)
    try:
        report = run_rollout(target, registry, settings, prometheus, set_weight,
                             _recorder_factory(args, config, registry),
                             say=lambda line: print(line, flush=True))
    except rollout.RolloutRefused as error:
        raise UsageError(f"serve rollout: {error}; nothing changed") from None
    print(f"  rendered HTTPRoute: {route_path}", flush=True)
    if report.outcome == PROMOTED:
        print(outcome_line(report), flush=True)
    else:
        print(f"mptfx: error: {outcome_line(report)}", file=sys.stderr, flush=True)
    return report.exit_code
