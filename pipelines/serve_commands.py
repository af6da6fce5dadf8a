"""`mptfx serve`: what TF Serving serves, and the verbs that change it.

    mptfx serve status [--json]                 versions, labels, aliases; repairs the aliases
    mptfx serve canary VERSION [--weight PCT]   VERSION on trial beside the stable
    mptfx serve promote                         the canary becomes stable
    mptfx serve rollback [--to VERSION]         back to the previous stable
    mptfx serve pin VERSION                     serve VERSION as stable, no canary
    mptfx serve check --url URL [--label L]     replay the warm-up requests against TF Serving
    mptfx serve render                          write the HTTPRoute and monitoring objects
    mptfx serve rollout [--if-canary]           step the canary up while Prometheus says it
                                                is healthy; promote it, or abort it
    mptfx serve sidecar --upstream URL          count TF Serving's answers for Prometheus

Every verb writes `<serving_dir>/models.config`, then moves the MLflow aliases (champion =
stable, challenger = canary), then renders `<workspace>/k8s/serving-route.yaml` (the
HTTPRoute weights). A refused verb (unknown, unpushed or never-blessed version) exits 2 with
one line and changes nothing. Imports stay light until a command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from components.errors import EXIT_OK, EXIT_PIPELINE_FAILED, UsageError
from pipelines import serve_rollout
from pipelines.config import Config


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", default="workspace",
                        help="workspace folder (default ./workspace)")
    parser.add_argument("--config", help="YAML config (default: configs/local.yaml when present)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override one config key, e.g. --set pusher.model_name=digits")
    parser.add_argument("--tracking-uri", help="MLflow store (default: tracking.uri, "
                        "$MLFLOW_TRACKING_URI, else sqlite:///<workspace>/mlflow.db)")
    parser.add_argument("--k8s-out", metavar="DIR",
                        help="where the HTTPRoute is rendered (default <workspace>/k8s)")


def _version(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a version is a positive integer. Received: {text!r}")
    return int(text)


def register(commands: Any) -> None:
    """Add `serve` and its actions to the `mptfx` argparse tree."""
    serve = commands.add_parser("serve", help="what TF Serving serves: labels, canary, rollback",
                                description=__doc__.split("\n\n")[1])
    actions = serve.add_subparsers(dest="serve_command", required=True, metavar="ACTION")
    status = actions.add_parser("status", help="versions, labels, aliases (repairs aliases)")
    status.add_argument("--json", action="store_true", help="print the state as JSON")
    canary = actions.add_parser("canary", help="put VERSION on trial beside the stable")
    canary.add_argument("version", type=_version, metavar="VERSION")
    canary.add_argument("--weight", type=int, metavar="PCT",
                        help="percent of predict requests to the canary (default "
                        "serving.canary_weight)")
    actions.add_parser("promote", help="the canary becomes stable")
    rollback = actions.add_parser("rollback", help="back to the previous stable")
    rollback.add_argument("--to", type=_version, metavar="VERSION",
                          help="roll back to this version instead")
    pin = actions.add_parser("pin", help="serve VERSION as stable, without canary")
    pin.add_argument("version", type=_version, metavar="VERSION")
    check = actions.add_parser("check", help="replay warm-up requests against TF Serving REST")
    check.add_argument("--url", required=True, help="TF Serving REST root, e.g. "
                       "http://127.0.0.1:8501")
    check.add_argument("--label", default="stable", help="label to address (default stable)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    actions.add_parser("render", help="write the HTTPRoute, ServiceMonitor and PrometheusRule "
                       "for the current labels and config into --k8s-out")
    serve_rollout.add_actions(actions)
    for name, parser in actions.choices.items():
        if name == "sidecar":  # no workspace, config or MLflow: a proxy in a serving pod
            continue
        _common(parser)
        parser.set_defaults(handler=command_serve)


def _open(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The config, the ServingTarget and the RegistryView the verbs work on."""
    from components.serving.rollout import ServingTarget
    from components.tracking.reader import open_reader, sqlite_path
    from components.tracking.store import (
        is_local_uri,
        local_store_uri,
        mlflow_client,
        requested_tracking_uri,
        require_reachable,
    )
    from pipelines.config import ConfigError, load_config
    from pipelines.rollout_verbs import RegistryView

    try:
        config = load_config(args.config, args.set or [])
    except ConfigError as error:
        raise UsageError(str(error)) from None
    workspace = Path(args.workspace).resolve()
    serving_dir = Path(config.pusher.serving_dir or workspace / "serving")
    target = ServingTarget(serving_dir, _model_name(config, serving_dir))
    uri = (args.tracking_uri or requested_tracking_uri(config.tracking.uri, os.environ)
           or local_store_uri(workspace))
    reader = None
    if config.tracking.register_model:
        database = sqlite_path(uri)
        if not is_local_uri(uri):
            require_reachable(uri, config.tracking.connect_timeout_seconds)
        if database is None or database.exists():
            reader = open_reader(uri)
    # MLflow itself is imported only when an alias moves or a rollout is recorded.
    return config, target, RegistryView.open(reader, target.model_name,
                                             connect=lambda: mlflow_client(uri))


def _model_name(config: Config, serving_dir: Path) -> str:
    """pusher.model_name; when the config does not name the model (it was named after
    data.source, which a run's --data may have replaced), the one model the serving folder
    serves, if it serves exactly one."""
    from components.serving.models_config import models_config_path, served_model_names

    if config.named_after:
        served = served_model_names(models_config_path(serving_dir))
        if len(served) == 1:
            return served[0]
    return config.pusher.model_name


def _route_weight(args: argparse.Namespace, config: Config, labels: Any, route: Path) -> int:
    if labels.canary is None:
        return 0
    if getattr(args, "weight", None) is not None:
        return args.weight
    if args.serve_command != "canary" and route.exists():  # keep the weight already rolled out
        import yaml

        for document in yaml.safe_load_all(route.read_text()):
            for rule in document["spec"]["rules"]:
                weights = [ref.get("weight") for ref in rule["backendRefs"]]
                if len(weights) == 2:
                    return int(weights[1])
    return config.serving.canary_weight


def _run_verb(args: argparse.Namespace, config: Config, target: Any, registry: Any) -> int:
    from pipelines import rollout_verbs as rollout
    from pipelines.kubernetes.objects import write_manifests
    from pipelines.kubernetes.serving import ROUTE_FILE, ROUTE_HEADER, render_http_route

    if getattr(args, "weight", None) is not None and not 0 <= args.weight <= 100:
        raise UsageError(f"--weight must be between 0 and 100. Received: {args.weight}")
    verbs = {
        "canary": lambda: rollout.canary(target, registry, args.version),
        "promote": lambda: rollout.promote(target, registry),
        "rollback": lambda: rollout.rollback(target, registry, args.to),
        "pin": lambda: rollout.pin(target, registry, args.version),
    }
    try:
        labels = verbs[args.serve_command]()
    except rollout.RolloutRefused as error:
        raise UsageError(f"serve {args.serve_command}: {error}; nothing changed") from None
    route_path = Path(args.k8s_out or Path(args.workspace).resolve() / "k8s") / ROUTE_FILE
    weight = _route_weight(args, config, labels, route_path)
    moved = rollout.apply(target, registry, labels)
    write_manifests(route_path, [render_http_route(config, weight)], ROUTE_HEADER)
    served = ", ".join(f"{name} {version}" for name, version in labels.as_dict().items())
    print(f"mptfx serve {args.serve_command}: {target.model_name} serves {served} "
          f"({target.config_path})")
    print(f"  aliases: {'; '.join(moved) if moved else 'unchanged'}")
    print(f"  route: {weight} % of predict requests to the canary ({route_path})")
    return EXIT_OK


def _print_status(state: dict[str, Any]) -> None:
    print(f"{state['model']}: {state['models_config']}")
    rows = [("version", "labels", "registered", "blessed", "aliases")]
    for row in state["versions"]:
        blessed = "-" if row["blessed"] is None else ("yes" if row["blessed"] else "no")
        rows.append((str(row["version"]), ",".join(row["labels"]) or "-",
                     f"v{row['registered_version']}" if row["registered_version"] else "-",
                     blessed, ",".join(row["aliases"]) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    for line in state["repaired"]:
        print(f"  repaired (aliases follow models.config): {line}")
    for line in state["problems"]:
        print(f"  problem: {line}")


def _run_render(args: argparse.Namespace, config: Config, target: Any) -> int:
    from pipelines.kubernetes.objects import write_manifests
    from pipelines.kubernetes.rollout_job import ROLLOUT_FILE, ROLLOUT_HEADER, rollout_objects
    from pipelines.kubernetes.serving import ROUTE_FILE, render_all

    out = Path(args.k8s_out or Path(args.workspace).resolve() / "k8s")
    weight = _route_weight(args, config, target.labels(), out / ROUTE_FILE)
    paths = render_all(out, config, weight)
    paths.append(write_manifests(out / ROLLOUT_FILE, rollout_objects(config), ROLLOUT_HEADER))
    for path in paths:
        print(f"mptfx serve render: {path}")
    return EXIT_OK


def _run_check(args: argparse.Namespace, target: Any) -> int:
    from pipelines.serve_check import EndpointError, check_endpoint

    try:
        report = check_endpoint(args.url, target, args.label)
    except (EndpointError, LookupError) as error:
        raise UsageError(f"serve check: {error}") from None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"mptfx serve check: {report['url']} (version {report['version']})")
        for result in report["requests"]:
            print(f"  {result['signature_name']:<16} {result['latency_ms']:8.1f} ms  "
                  f"{'agrees' if result['agrees'] else 'DISAGREES'} with the SavedModel")
        print(f"  agreement {report['agreement']:.0%}, latency median "
              f"{report['latency_ms']['median']:.1f} ms, max {report['latency_ms']['max']:.1f} ms")
    return EXIT_OK if report["agreement"] == 1.0 else EXIT_PIPELINE_FAILED


def command_serve(args: argparse.Namespace) -> int:
    """`mptfx serve ACTION`."""
    from components.serving.models_config import ModelsConfigError
    from pipelines.console import quiet_tensorflow
    from pipelines.rollout_verbs import check_and_repair

    # Before TensorFlow and MLflow are imported: a refusal must be the only line printed.
    quiet_tensorflow()
    try:
        config, target, registry = _open(args)
        if args.serve_command == "check":
            return _run_check(args, target)
        if args.serve_command == "status":
            state = check_and_repair(target, registry)
            if args.json:
                print(json.dumps(state, indent=2))
            else:
                _print_status(state)
            for line in state["repaired"]:
                print(f"mptfx serve status: repaired {line}", file=sys.stderr)
            return EXIT_OK
        if args.serve_command == "render":
            return _run_render(args, config, target)
        if args.serve_command == "rollout":
            return serve_rollout.run_rollout_command(args, config, target, registry)
        return _run_verb(args, config, target, registry)
    except ModelsConfigError as error:
        raise UsageError(str(error)) from None
