"""A real Prometheus server for the tests (Debian's `prometheus`, which
`scripts/start_services.sh` installs): a temporary config and data folder, 127.0.0.1, a free
port, a short scrape interval; stopped when the `with` block ends.

    targets = [ScrapeTarget("mptfx-serving", "127.0.0.1:8501",
                            "/monitoring/prometheus/metrics", {"track": "canary"})]
    with prometheus_server(tmp_path, targets) as prometheus:
        requests.get(f"{prometheus.url}/api/v1/query", params={"query": "up"})
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
import yaml

from tests.ports import free_port


@dataclass(frozen=True)
class ScrapeTarget:
    """One endpoint Prometheus scrapes, and the target labels it adds to its series."""

    job: str
    address: str
    path: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunningPrometheus:
    url: str
    process: subprocess.Popen
    log: Path

    def query(self, promql: str) -> list[dict]:
        """The result of an instant query (fails the test on a refused query)."""
        body = requests.get(f"{self.url}/api/v1/query", params={"query": promql},
                            timeout=10).json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_until_scraped(self, count: int, timeout: float = 60.0) -> None:
        """Wait until `count` targets answered a scrape (`up == 1`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.query("up == 1")) >= count:
                return
            time.sleep(0.2)
        raise AssertionError(f"Prometheus scraped fewer than {count} targets in {timeout} s: "
                             f"{self.query('up')}; log: {self.log.read_text()[-2000:]}")


def program(name: str) -> str:
    """The path of `prometheus` or `promtool`; fails naming the setup script when missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run `bash scripts/start_services.sh` (as root "
                    f"it installs Debian's prometheus package; `make test` runs it)")
    return path


def _config(targets: list[ScrapeTarget], scrape_interval: str, rule_files: list[Path]) -> dict:
    jobs: dict[tuple[str, str], list[dict]] = {}
    for target in targets:
        jobs.setdefault((target.job, target.path), []).append(
            {"targets": [target.address], "labels": dict(target.labels)})
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval,
                   "scrape_timeout": scrape_interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [{"job_name": job, "metrics_path": path, "static_configs": configs}
                           for (job, path), configs in jobs.items()],
    }


@contextlib.contextmanager
def prometheus_server(folder: Path, targets: list[ScrapeTarget], scrape_interval: str = "1s",
                      rule_files: list[Path] = ()) -> Iterator[RunningPrometheus]:
    """Start Prometheus scraping `targets`; it is stopped (and waited for) on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump(_config(targets, scrape_interval, list(rule_files))))
    port = free_port()
    log = folder / "prometheus.log"
    with log.open("w") as stream:
        process = subprocess.Popen(
            [program("prometheus"), f"--config.file={config}",
             f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            stdout=stream, stderr=subprocess.STDOUT, cwd=folder)
    running = RunningPrometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise AssertionError(f"Prometheus exited {process.returncode}: "
                                     f"{log.read_text()[-2000:]}")
            try:
                if requests.get(f"{running.url}/-/ready", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"Prometheus not ready in 60 s: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
