"""`mptfx k8s submit --driver-job`: the in-cluster driver Job, with every `submit` flag.

--config and --set reach the driver as the run's effective configuration (its ConfigMap);
--data, --log-dir, --follow-logs and --resume as arguments of its command; --context,
--in-cluster and --driver-job only say how to reach the cluster from here.
"""

from __future__ import annotations

import argparse
import secrets
from typing import Any

import yaml

from components.errors import EXIT_OK, UsageError
from pipelines.config import Config
from pipelines.kubernetes.api import KubernetesError
from pipelines.kubernetes.driver import KubernetesRunner
from pipelines.kubernetes.manifests import config_map, driver_job

_FORWARDED_PATHS = ("data", "log_dir")


def driver_arguments(args: argparse.Namespace) -> list[str]:
    """The `submit` flags the in-cluster driver needs, as arguments of its command.

    Paths must be absolute: the pod sees the workspace volume, not this machine's folder.

    Raises:
        UsageError: a relative --data or --log-dir, named.
    """
    forwarded: list[str] = []
    for name in _FORWARDED_PATHS:
        value = getattr(args, name)
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if ":" not in value and not value.startswith("/"):
            raise UsageError(f"{flag} {value} is relative; with --driver-job it is read inside "
                             f"the driver pod: give its absolute path on the workspace volume "
                             f"(e.g. {flag} /mnt/mptfx/...)")
        forwarded += [flag, value]
    if args.follow_logs:
        forwarded.append("--follow-logs")
    if getattr(args, "verbose", False):  # the libraries' output in the driver pod's log too
        forwarded.append("--verbose")
    return forwarded


def create_driver_job(config: Config, run_id: str, forwarded: list[str], resume: bool,
                      clients: tuple[Any, Any, Any]) -> int:
    """Create the run's ConfigMap (its effective configuration) and the driver Job; returns
    the exit code. Resuming, the run's existing ConfigMap is kept."""
    runner = KubernetesRunner(config, *clients)
    try:
        runner.create_object(config_map(config, run_id,
                                        yaml.safe_dump(config.model_dump(), sort_keys=False)))
    except KubernetesError:
        if not resume:
            raise
        # Resuming: the run's ConfigMap is already there, and it is the run's configuration.
    # A resumed run's earlier driver Job may still exist: the new one gets its own name.
    suffix = f"-r{secrets.token_hex(2)}" if resume else ""
    job = driver_job(config, run_id, forwarded, resume=resume, name_suffix=suffix)
    runner.create_object(job)
    print(f"mptfx k8s submit {run_id}: driver Job {job['metadata']['name']} created in "
          f"namespace {config.kubernetes.namespace}; watch it with: mptfx k8s status {run_id}")
    return EXIT_OK
