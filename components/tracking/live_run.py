"""The pipeline run's MLflow run, open while the pipeline runs.

MLflow's system-metrics monitor logs to a run while it is RUNNING, so the run a pipeline
run is recorded in is created when the pipeline starts, not after it: `mptfx run` opens it
in the background while the first components run (`PreparedRun`), the Kubernetes driver
before it creates the first Job. Its id reaches the Trainer the way MLflow hands a run to
a child process, `MLFLOW_RUN_ID` with `MLFLOW_TRACKING_URI` (`trainer_environment`);
`components/tracking/system_metrics.py` reads them there. After the run the recorder logs
everything else into the same run and ends it (`recorder.record_pipeline_run`).

The run carries the tag `mptfx.pipeline_run_id`: a resumed Kubernetes driver finds the
run its first attempt opened instead of opening a second one.

    prepared = PreparedRun.start(store, "20261204-120000-ab12", system_metrics_interval=2)
    prepared.wait(60)            # the MLflow run id, or None when it could not be opened
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping

from components.core.text import one_line
from components.tracking.store import TrackingStore, ensure_experiment, mlflow_client
from components.tracking.system_metrics import (
    ENV_RUN_ID,
    ENV_SAMPLING_INTERVAL,
    ENV_TRACKING_URI,
)

PIPELINE_RUN_TAG = "mptfx.pipeline_run_id"

_log = logging.getLogger("mptfx")


def open_run(store: TrackingStore, pipeline_run_id: str, started: float | None = None) -> str:
    """The id of the RUNNING MLflow run of `pipeline_run_id` in the store's experiment,
    created (named after the pipeline run, starting at `started`, epoch seconds, so that
    its duration is the run's wall time) when there is none."""
    client = mlflow_client(store.uri)
    experiment_id = ensure_experiment(client, store.experiment, store.artifact_location)
    found = client.search_runs(
        [experiment_id], max_results=1,
        filter_string=(f"tags.`{PIPELINE_RUN_TAG}` = '{pipeline_run_id}' "
                       f"and attributes.status = 'RUNNING'"))
    if found:
        return found[0].info.run_id
    run = client.create_run(experiment_id, run_name=pipeline_run_id,
                            start_time=None if started is None else int(started * 1000),
                            tags={PIPELINE_RUN_TAG: pipeline_run_id})
    return run.info.run_id


def trainer_environment(store: TrackingStore, run_id: str,
                        sampling_interval: float) -> dict[str, str]:
    """What the Trainer's process needs to log system metrics to `run_id`; the URI as the
    store has it (a password stays in MLFLOW_TRACKING_PASSWORD, never in the value)."""
    return {ENV_RUN_ID: run_id, ENV_TRACKING_URI: store.uri,
            ENV_SAMPLING_INTERVAL: f"{sampling_interval:g}"}


@contextlib.contextmanager
def environment(variables: Mapping[str, str]) -> Iterator[None]:
    """`variables` in os.environ for the `with` block, the previous values put back."""
    previous = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class PreparedRun:
    """The store made ready (MLflow imported, a local database created) and, with system
    metrics on, the pipeline run's MLflow run opened, in a background thread while the first
    components run. A failure is logged, never raised: the recorder then creates the run
    after the pipeline, as without system metrics.

    Attributes:
        run_id: the opened run's id, once the thread is done (None when not opened).
        error: why it was not opened, if it failed.
    """

    def __init__(self, store: TrackingStore, pipeline_run_id: str | None,
                 started: float | None = None) -> None:
        self.store = store
        self._started = started
        self.run_id: str | None = None
        self.error: str | None = None
        self._pipeline_run_id = pipeline_run_id
        self._thread = threading.Thread(target=self._prepare, name="mptfx-mlflow-store",
                                        daemon=True)

    @classmethod
    def start(cls, store: TrackingStore, pipeline_run_id: str | None,
              started: float | None = None) -> PreparedRun:
        """Starts preparing; `pipeline_run_id` None only readies the store; `started`: when
        the pipeline run started (epoch seconds)."""
        prepared = cls(store, pipeline_run_id, started)
        prepared._thread.start()
        return prepared

    @classmethod
    def opened(cls, store: TrackingStore, run_id: str | None) -> PreparedRun:
        """A run opened already (the Kubernetes driver opens it before the first Job)."""
        prepared = cls(store, None)
        prepared.run_id = run_id
        return prepared

    def wait(self, timeout: float) -> str | None:
        """The opened run's id, waiting at most `timeout` seconds for the thread."""
        if self._thread.ident is not None:
            self._thread.join(timeout)
        return None if self._thread.is_alive() else self.run_id

    def _prepare(self) -> None:
        try:
            if self._pipeline_run_id is None:
                mlflow_client(self.store.uri).search_experiments(max_results=1)
            else:
                self.run_id = open_run(self.store, self._pipeline_run_id, self._started)
        except Exception as error:  # the recorder's own attempt reports it
            self.error = one_line(error, limit=300, redact=True)
            _log.warning("preparing the MLflow store failed: %s", self.error)


# How long the Trainer's start waits for the run to be opened (MLflow's import, a server).
OPEN_WAIT_SECONDS = 120.0


@contextlib.contextmanager
def trainer_handoff(prepared: PreparedRun | None, sampling_interval: float) -> Iterator[None]:
    """The opened run handed to an in-process Trainer for the `with` block (its environment
    variables set, then put back); nothing when no run was opened."""
    run_id = prepared.wait(OPEN_WAIT_SECONDS) if prepared is not None else None
    if run_id is None:
        _log.info("system metrics: no MLflow run opened%s; the Trainer logs none",
                  f" ({prepared.error})" if prepared is not None and prepared.error else "")
        yield
        return
    with environment(trainer_environment(prepared.store, run_id, sampling_interval)):
        yield


@contextlib.contextmanager
def ended_on_crash(prepared: PreparedRun | None) -> Iterator[None]:
    """Marks the opened run FAILED when the `with` block raises (the recorder ends it
    otherwise), so that no run stays RUNNING after its pipeline crashed."""
    try:
        yield
    except BaseException:
        run_id = prepared.wait(0) if prepared is not None else None
        if run_id is not None:
            try:
                mlflow_client(prepared.store.uri).set_terminated(run_id, "FAILED")
            except Exception:  # the crash is the error to report
                _log.warning("could not end MLflow run %s", run_id, exc_info=True)
        raise

