"""TF Serving itself, in the InfraValidator's pod: the Kubernetes side of the check.

On Kubernetes the InfraValidator's pod runs the real TF Serving image as a native sidecar
(an init container with `restartPolicy: Always`, pipelines/kubernetes/infra_sidecar.py),
started with the serving Deployment's flags and resources and `--model_base_path` on an
emptyDir both containers mount. The validator copies the candidate in as version 1 (a
hidden staging folder renamed at once: TF Serving never sees half a version), waits for
`GET /v1/models/<name>` to report it AVAILABLE (TF Serving replays the warm-up records
before that), and sends the same REST predict bodies the local check sends.

The pod's environment names the sidecar (`SIDECAR_URL_ENV`, `SIDECAR_MODEL_DIR_ENV`); a pod
without them, and every local run, use `model_process.ModelProcess` instead.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

from components.infra.model_process import ModelServerError, ServerTimeout

SIDECAR_URL_ENV = "MPTFX_INFRA_SERVING_URL"
SIDECAR_MODEL_DIR_ENV = "MPTFX_INFRA_MODEL_DIR"
CANDIDATE_VERSION = 1
_POLL_SECONDS = 0.5
_REQUEST_TIMEOUT = 60.0


def sidecar_from_environment(model_name: str) -> TFServingSidecar | None:
    """The sidecar the pod's environment names, or None (the local check)."""
    url = os.environ.get(SIDECAR_URL_ENV, "").strip()
    model_dir = os.environ.get(SIDECAR_MODEL_DIR_ENV, "").strip()
    if not url or not model_dir:
        return None
    return TFServingSidecar(url, model_dir, model_name)


class TFServingSidecar:
    """TF Serving's REST API at `url`, serving `model_name` from `model_dir`."""

    kind = "tf serving"

    def __init__(self, url: str, model_dir: str, model_name: str) -> None:
        import requests

        self.url = url.rstrip("/")
        self.model_dir = model_dir
        self.model_name = model_name
        self._session = requests.Session()

    def __enter__(self) -> TFServingSidecar:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _status(self) -> tuple[int, dict[str, Any]] | None:
        import requests

        try:
            response = self._session.get(f"{self.url}/v1/models/{self.model_name}",
                                         timeout=_REQUEST_TIMEOUT)
        except requests.RequestException:
            return None
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, body if isinstance(body, dict) else {}

    def start(self, timeout: float) -> float:
        """Wait until TF Serving answers on its REST port (404 before a version exists)."""
        started = time.monotonic()
        while self._status() is None:
            if time.monotonic() - started > timeout:
                raise ServerTimeout(f"TF Serving at {self.url} did not answer within "
                                    f"{timeout:g} s")
            time.sleep(_POLL_SECONDS)
        return time.monotonic() - started

    def load(self, candidate_dir: str, timeout: float) -> dict[str, Any]:
        """Copy the candidate in as version 1 and wait until TF Serving serves it."""
        started = time.monotonic()
        staging = os.path.join(self.model_dir, f".staging-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(candidate_dir, staging)
        os.rename(staging, os.path.join(self.model_dir, str(CANDIDATE_VERSION)))
        while time.monotonic() - started <= timeout:
            answer = self._status()
            if answer is None:
                raise ModelServerError(f"TF Serving at {self.url} stopped answering while "
                                       "loading the candidate (killed over its memory limit?)")
            for version in answer[1].get("model_version_status", []):
                status = version.get("status") or {}
                if version.get("state") == "AVAILABLE":
                    return {"loaded": True, "seconds": time.monotonic() - started}
                if status.get("error_code", "OK") != "OK":
                    return {"error": f"TF Serving did not load it: {status.get('error_code')}: "
                                     f"{status.get('error_message', '')[:300]}"}
            time.sleep(_POLL_SECONDS)
        raise ServerTimeout(f"TF Serving did not finish loading the candidate within "
                            f"{timeout:g} s")

    def predict(self, body: dict[str, Any], timeout: float = _REQUEST_TIMEOUT) -> dict[str, Any]:
        """POST one predict body; TF Serving's `{"error": ...}` when it refuses."""
        import requests

        try:
            response = self._session.post(
                f"{self.url}/v1/models/{self.model_name}/versions/{CANDIDATE_VERSION}:predict",
                json=body, timeout=timeout)
        except requests.RequestException as error:
            raise ModelServerError(f"TF Serving at {self.url} did not answer a request: "
                                   f"{type(error).__name__}") from None
        try:
            reply = response.json()
        except ValueError:
            reply = {"error": response.text[:300]}
        if response.status_code != 200:
            return {"error": (reply.get("error") if isinstance(reply, dict) else None)
                    or f"HTTP {response.status_code}"}
        return reply

    def memory_peak_bytes(self) -> int | None:
        """Not visible from this container: the kubelet holds the sidecar to its limit."""
        return None

    def over_limit(self) -> bool:
        """The kubelet kills the sidecar over its limit; then it stops answering."""
        return False

    def close(self) -> None:
        self._session.close()
