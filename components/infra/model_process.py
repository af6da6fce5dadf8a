"""The local stand-in for TF Serving's process: the candidate loaded in a process of its own.

Where neither a container engine nor TF Serving's binary exists (a laptop, this CI), the
InfraValidator starts `python -m components.infra.model_process`, which imports TensorFlow,
then on request loads the SavedModel with the serving tag, replays its warm-up records as
TF Serving's `--enable_model_warmup` does before a version is ready, and answers TF
Serving's REST predict bodies in either format (`{"signature_name": ..., "inputs": {...}}`
or `{"instances": [...]}`, `{"b64": ...}` for strings; components/serving/rest_json.py) with
TF Serving's answer (`outputs` or `predictions`, or `{"error": ...}` as TF Serving answers a
failed request). The parent holds it to the serving Deployment's memory limit (see `MemoryWatch`).

    with ModelProcess(memory_limit_bytes=4 << 30, log_path="model_process.log") as server:
        server.start(timeout=600)
        server.load("/ws/.../Format-Serving", timeout=60)
        reply = server.predict({"signature_name": "serving_default", "inputs": {...}})

One JSON message per line: the child's stdout is its channel to the parent (anything a
library prints goes to its stderr, the log file), its stdin the parent's requests.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from components.core.text import one_line
from components.serving.rest_json import ROWS_KEY, answer, parse_request
from components.trainer.keras_private import skip_tensorflow_eager_keras_import

_WATCH_SECONDS = 0.02


class ModelServerError(RuntimeError):
    """The model server did not start, load or answer; the message says why in one line."""


class ServerTimeout(ModelServerError):
    """The model server did not answer in time."""


def first_line(error: BaseException) -> str:
    """What went wrong, in one line, after the exception's type (for a TensorFlow error
    inside a graph, its cause: `one_line` skips the graph's context)."""
    line = one_line(error, limit=300)
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def _peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


# -- the child ---------------------------------------------------------------------------


class _Served:
    """The loaded candidate in the child."""

    def __init__(self) -> None:
        self.model: Any = None

    def load(self, model_dir: str) -> dict[str, Any]:
        import tensorflow as tf

        from components.serving.warmup_requests import read_warmup_requests

        started = time.monotonic()
        self.model = tf.saved_model.load(model_dir, tags=[tf.saved_model.SERVING])
        warmup = read_warmup_requests(model_dir)
        for number, request in enumerate(warmup, 1):
            # As TF Serving replays them: the recorded tensors, straight to the signature.
            tensors = {key: tf.constant(value) for key, value in request.inputs.items()}
            reply = self._run(request.signature_name, lambda specs, t=tensors: t)
            if "error" in reply:
                return {"error": f"warm-up request {number} ({request.signature_name}) failed "
                                 f"while loading: {reply['error']}"}
        return {"loaded": True, "seconds": time.monotonic() - started,
                "warmup_requests": len(warmup), "signatures": sorted(self.model.signatures)}

    def predict(self, body: dict[str, Any]) -> dict[str, Any]:
        """One REST predict body, columns (`inputs`) or rows (`instances`): TF Serving's
        answer (`{"outputs": ...}` or `{"predictions": ...}`), or `{"error": ...}`."""
        import tensorflow as tf

        rows = ROWS_KEY in body

        def inputs(specs: dict[str, Any]) -> dict[str, Any]:
            arrays, _ = parse_request(body, {key: spec.dtype.as_numpy_dtype
                                             for key, spec in specs.items()})
            return {key: tf.constant(array, dtype=specs[key].dtype)
                    for key, array in arrays.items()}

        return self._run(body.get("signature_name") or "serving_default", inputs, rows)

    def _run(self, name: str, make_inputs: Any, rows: bool = False) -> dict[str, Any]:
        signature = self.model.signatures.get(name)
        if signature is None:
            return {"error": f'Serving signature name: "{name}" not found in signature def'}
        try:
            outputs = signature(**make_inputs(signature.structured_input_signature[1]))
        except Exception as error:  # TF Serving answers a failed request with its error
            return {"error": first_line(error)}
        return answer({key: value.numpy() for key, value in outputs.items()}, rows)


def _serve(channel: TextIO) -> None:
    served = _Served()

    def send(message: dict[str, Any]) -> None:
        message["peak_rss_bytes"] = _peak_rss_bytes()
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    started = time.monotonic()
    # The candidate is a plain TensorFlow SavedModel (TF Serving runs no Python and no
    # Keras): skipping `import tensorflow`'s eager import of Keras' optimizers makes this
    # process start about 40% sooner and 130 MB smaller (docs/guide/infra-validation.md).
    skip_tensorflow_eager_keras_import()
    import tensorflow as tf  # noqa: F401

    send({"event": "started", "seconds": time.monotonic() - started})
    for line in sys.stdin:
        message = json.loads(line)
        if "load" in message:
            try:
                send(served.load(message["load"]))
            except Exception as error:
                send({"error": f"loading failed: {first_line(error)}"})
        else:
            send(served.predict(message))


def main() -> None:
    """The child: stdout becomes the channel; whatever libraries print goes to stderr."""
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    _serve(channel)


# -- the parent --------------------------------------------------------------------------


def _rss_bytes(pid: int) -> tuple[int, int] | None:
    """(current, peak) resident set of `pid` from /proc (Linux), None when unreadable."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(value.split()[0]) * 1024
    if len(values) < 2:
        return None
    return values["VmRSS"], values["VmHWM"]


class MemoryWatch:
    """Kills the process whose resident memory passes `limit_bytes`, as the kernel's
    out-of-memory killer does to a container over its cgroup's limit.

    An address-space limit (RLIMIT_AS) cannot stand in for it: TensorFlow maps far more than
    it touches (here `import tensorflow` alone fails under a 1 GiB RLIMIT_AS at 56 MB
    resident), and cgroups need root. So the resident set is read from /proc every 20 ms,
    and the kernel's own peak (VmHWM) catches what happens between two reads.
    """

    def __init__(self, process: subprocess.Popen, limit_bytes: int) -> None:
        self.process = process
        self.limit_bytes = limit_bytes
        self.peak_bytes = 0
        self.killed_at_bytes: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="memory-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(_WATCH_SECONDS) and self.process.poll() is None:
            if self.sample():
                return

    def sample(self) -> bool:
        """Read the process's memory once (nothing while it execs); True when it was over
        the limit and killed."""
        rss = _rss_bytes(self.process.pid)
        if rss is None:
            return False
        current, peak = rss
        self.peak_bytes = max(self.peak_bytes, peak)
        if max(current, peak) <= self.limit_bytes:
            return False
        self.killed_at_bytes = max(current, peak)
        try:
            os.kill(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


class ModelProcess:
    """The parent's handle on the child: start, load, predict, peak memory, close."""

    kind = "model process"

    def __init__(self, memory_limit_bytes: int, log_path: str | os.PathLike) -> None:
        self.memory_limit_bytes = memory_limit_bytes
        self.log_path = Path(log_path)
        self.peak_rss_bytes = 0
        self._process: subprocess.Popen | None = None
        self._replies: queue.Queue = queue.Queue()
        self._watch: MemoryWatch | None = None

    def __enter__(self) -> ModelProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self, timeout: float) -> float:
        """Start the child and wait until TensorFlow is imported; returns the seconds."""
        root = str(Path(__file__).resolve().parents[2])  # where `components` is importable
        env = dict(os.environ, PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "components.infra.model_process"], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        self._watch = MemoryWatch(self._process, self.memory_limit_bytes)
        threading.Thread(target=self._read, name="model-process-reader", daemon=True).start()
        return self._receive(timeout, "starting")["seconds"]

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self._replies.put(json.loads(line))
        self._replies.put(None)  # end of file: the child is gone

    def _receive(self, timeout: float, doing: str) -> dict[str, Any]:
        try:
            reply = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise ServerTimeout(f"the model process did not finish {doing} within "
                                f"{timeout:g} s") from None
        if reply is None:
            raise ModelServerError(self._death(doing))
        self.peak_rss_bytes = max(self.peak_rss_bytes, reply.pop("peak_rss_bytes", 0))
        return reply

    def _death(self, doing: str) -> str:
        assert self._process is not None
        code = self._process.wait()
        watch = self._watch
        if watch is not None and watch.killed_at_bytes is not None:
            return (f"the model process went over the memory limit "
                    f"{_gib(self.memory_limit_bytes)} while {doing} "
                    f"(resident {_gib(watch.killed_at_bytes)}); killed as the "
                    f"out-of-memory killer would")
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return f"the model process died while {doing} ({how}; its log: {self.log_path})"

    def _send(self, message: dict[str, Any]) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(message) + "\n")
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the reader sees the end of file and _receive says how it died

    def load(self, model_dir: str, timeout: float) -> dict[str, Any]:
        """Load `model_dir` and replay its warm-up records; the reply has `seconds` or
        `error`."""
        self._send({"load": model_dir})
        return self._receive(timeout, "loading the candidate")

    def predict(self, body: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """Answer one REST predict body: `{"outputs": ...}` or `{"error": ...}`."""
        self._send(body)
        return self._receive(timeout, "answering a request")

    def memory_peak_bytes(self) -> int:
        """The child's peak resident memory: the kernel's VmHWM as the watch read it, else
        (no /proc) the child's own getrusage, which may count more (575 MiB against a VmHWM
        of 470 MiB in this sandbox)."""
        if self._watch is not None and self._process is not None \
                and self._process.poll() is None:
            self._watch.sample()
        watched = self._watch.peak_bytes if self._watch is not None else 0
        return watched or self.peak_rss_bytes

    def over_limit(self) -> bool:
        """Whether the child went over the memory limit (killed, or its peak above it)."""
        watch = self._watch
        return bool(watch and watch.killed_at_bytes) or \
            self.memory_peak_bytes() > self.memory_limit_bytes

    def close(self) -> None:
        """End the child (its stdin closed, then SIGKILL after 10 s) and the watch."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                process.stdin.close()  # type: ignore[union-attr]
                process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
        if self._watch is not None:
            self._watch.stop()
        self._process = None


if __name__ == "__main__":
    main()
