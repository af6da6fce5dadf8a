"""What the read-only commands read from an MLflow store, without importing MLflow for it.

`mptfx compare` and `mptfx serve status` answer in about a second: `import mlflow` alone
costs 1.5-2 s here (its package imports its GenAI, data and tracing parts), its sqlite store
another 0.7 s. For the embedded default, `sqlite:///<workspace>/mlflow.db`, they read the few
tables they need with Python's own sqlite3 instead, read-only; any other store (a server, a
PostgreSQL database) is read through MLflow's client as before.

    reader = open_reader("sqlite:////abs/workspace/mlflow.db")
    runs = reader.newest_mptfx_runs(None, 10)        # RunRecord, newest first
    reader.metric_history(runs[0].run_id, "loss")      # [(step, value), ...]
    reader.model_aliases("digits")                     # {"champion": "3"}

The tables are MLflow's own (runs, params, tags, latest_metrics, metrics, experiments,
model_versions, model_version_tags, registered_model_aliases). `open_reader` checks that
every column read is there and falls back to MLflow's client when one is not (a database
of another MLflow version); `tests/unit/test_tracking_mlflow.py` compares both readers on a
store MLflow wrote.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

TFX_RUN_ID_TAG = "mptfx.tfx_run_id"
_DELETED_VERSION_STAGE = "Deleted_Internal"  # MLflow's mark of a deleted model version
# Every column the sqlite reader reads: checked once when the store is opened.
_COLUMNS = {
    "experiments": ("experiment_id", "name", "lifecycle_stage", "creation_time"),
    "runs": ("run_uuid", "name", "status", "start_time", "experiment_id", "lifecycle_stage"),
    "params": ("key", "value", "run_uuid"),
    "tags": ("key", "value", "run_uuid"),
    "latest_metrics": ("key", "value", "is_nan", "run_uuid"),
    "metrics": ("key", "value", "is_nan", "step", "timestamp", "run_uuid"),
    "model_versions": ("name", "version", "current_stage"),
    "model_version_tags": ("key", "value", "name", "version"),
    "registered_model_aliases": ("alias", "version", "name"),
}


@dataclass(frozen=True)
class RunRecord:
    """One MLflow run as the comparison reads it (MLflow's `Run`, flattened)."""

    run_id: str
    run_name: str | None
    experiment_id: str
    status: str
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VersionRecord:
    """One registered model version: its number (text, as MLflow gives it) and tags."""

    version: str
    tags: dict[str, str] = field(default_factory=dict)


class StoreReader(Protocol):
    """The reads of `mptfx compare` and `mptfx serve`; unknown names give None or empty."""

    def experiment_id(self, name: str) -> str | None: ...
    def experiment_names(self) -> list[str]: ...
    def newest_mptfx_runs(self, experiment_ids: Sequence[str] | None,
                          limit: int) -> list[RunRecord]: ...
    def run(self, run_id: str) -> RunRecord | None: ...
    def run_by_tfx_id(self, tfx_run_id: str) -> RunRecord | None: ...
    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]: ...
    def model_versions(self, name: str) -> list[VersionRecord]: ...
    def model_aliases(self, name: str) -> dict[str, str]: ...


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI, else None."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def open_reader(uri: str) -> StoreReader:
    """A reader of the store at `uri`: sqlite3 on a sqlite file whose tables have every
    column read here, else MLflow's client (which imports MLflow)."""
    database = sqlite_path(uri)
    if database is not None and database.exists():
        reader = SqliteStoreReader(database)
        if reader.has_expected_columns():
            return reader
        reader.close()
    from components.tracking.store import mlflow_client

    return ClientStoreReader(mlflow_client(uri))


class SqliteStoreReader:
    """MLflow's sqlite store read with sqlite3, read-only (see the module doc)."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self._db = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)

    def close(self) -> None:
        self._db.close()

    def has_expected_columns(self) -> bool:
        """Whether every table read here has the columns read (MLflow's schema moves)."""
        try:
            for table, columns in _COLUMNS.items():
                present = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
                if not set(columns) <= present:
                    return False
        except sqlite3.Error:
            return False
        return True

    def _rows(self, sql: str, *args: Any) -> list[tuple]:
        return self._db.execute(sql, args).fetchall()

    def experiment_id(self, name: str) -> str | None:
        rows = self._rows("SELECT experiment_id FROM experiments WHERE name = ? AND "
                          "lifecycle_stage = 'active'", name)
        return str(rows[0][0]) if rows else None

    def experiment_names(self) -> list[str]:
        return [row[0] for row in self._rows(
            "SELECT name FROM experiments WHERE lifecycle_stage = 'active' "
            "ORDER BY creation_time DESC, experiment_id")]

    def newest_mptfx_runs(self, experiment_ids: Sequence[str] | None,
                          limit: int) -> list[RunRecord]:
        """Active runs tagged with a TFX run id, newest first (MLflow's order: start time
        descending, then run id)."""
        where, args = "", [TFX_RUN_ID_TAG]
        if experiment_ids is not None:
            where = f" AND r.experiment_id IN ({','.join('?' * len(experiment_ids))})"
            args += [int(e) for e in experiment_ids]
        else:
            where = (" AND r.experiment_id IN (SELECT experiment_id FROM experiments "
                     "WHERE lifecycle_stage = 'active')")
        rows = self._rows(
            "SELECT r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            f"AND t.key = ? WHERE r.lifecycle_stage = 'active'{where} "
            "ORDER BY r.start_time IS NULL, r.start_time DESC, r.run_uuid LIMIT ?",
            *args, limit)
        return [self._record(row[0]) for row in rows]

    def run(self, run_id: str) -> RunRecord | None:
        return self._record(run_id)

    def run_by_tfx_id(self, tfx_run_id: str) -> RunRecord | None:
        rows = self._rows(
            "SELECT r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "AND t.key = ? AND t.value = ? WHERE r.lifecycle_stage = 'active' AND "
            "r.experiment_id IN (SELECT experiment_id FROM experiments WHERE "
            "lifecycle_stage = 'active') "
            "ORDER BY r.start_time IS NULL, r.start_time DESC, r.run_uuid LIMIT 1",
            TFX_RUN_ID_TAG, tfx_run_id)
        return self._record(rows[0][0]) if rows else None

    def _record(self, run_id: str) -> RunRecord | None:
        rows = self._rows("SELECT name, experiment_id, status FROM runs WHERE run_uuid = ?",
                          run_id)
        if not rows:
            return None
        name, experiment_id, status = rows[0]
        query = "SELECT key, value{} FROM {} WHERE run_uuid = ?"
        return RunRecord(
            run_id=run_id, run_name=name, experiment_id=str(experiment_id), status=status,
            params=dict(self._rows(query.format("", "params"), run_id)),
            metrics={key: math.nan if is_nan else value for key, value, is_nan in
                     self._rows(query.format(", is_nan", "latest_metrics"), run_id)},
            tags=dict(self._rows(query.format("", "tags"), run_id)))

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        rows = self._rows("SELECT step, value, is_nan FROM metrics WHERE run_uuid = ? AND "
                          "key = ? ORDER BY step, timestamp", run_id, key)
        return [(step, math.nan if is_nan else value) for step, value, is_nan in rows]

    def model_versions(self, name: str) -> list[VersionRecord]:
        """Registered versions of `name`, oldest first (deleted ones left out)."""
        tags: dict[int, dict[str, str]] = {}
        for version, key, value in self._rows(
                "SELECT version, key, value FROM model_version_tags WHERE name = ?", name):
            tags.setdefault(version, {})[key] = value
        return [VersionRecord(str(version), tags.get(version, {})) for (version,) in self._rows(
            "SELECT version FROM model_versions WHERE name = ? AND current_stage != ? "
            "ORDER BY version", name, _DELETED_VERSION_STAGE)]

    def model_aliases(self, name: str) -> dict[str, str]:
        return {alias: str(version) for alias, version in self._rows(
            "SELECT alias, version FROM registered_model_aliases WHERE name = ?", name)}


class ClientStoreReader:
    """The same reads through MLflow's client: servers and databases other than sqlite."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def experiment_id(self, name: str) -> str | None:
        found = self.client.get_experiment_by_name(name)
        return None if found is None or found.lifecycle_stage != "active" else \
            found.experiment_id

    def experiment_names(self) -> list[str]:
        return [e.name for e in self.client.search_experiments()]

    def _search(self, experiment_ids: Sequence[str] | None, filter_string: str,
                limit: int) -> list[RunRecord]:
        ids = (list(experiment_ids) if experiment_ids is not None
               else [e.experiment_id for e in self.client.search_experiments()])
        runs = self.client.search_runs(ids, filter_string=filter_string, max_results=limit,
                                       order_by=["attributes.start_time DESC"])
        return [_record_of(run) for run in runs]

    def newest_mptfx_runs(self, experiment_ids: Sequence[str] | None,
                          limit: int) -> list[RunRecord]:
        return self._search(experiment_ids, f"tags.`{TFX_RUN_ID_TAG}` LIKE '%'", limit)

    def run(self, run_id: str) -> RunRecord | None:
        from mlflow.exceptions import MlflowException

        try:
            return _record_of(self.client.get_run(run_id))
        except MlflowException:
            return None

    def run_by_tfx_id(self, tfx_run_id: str) -> RunRecord | None:
        found = self._search(None, f"tags.`{TFX_RUN_ID_TAG}` = '{tfx_run_id}'", 1)
        return found[0] if found else None

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        history = self.client.get_metric_history(run_id, key)
        return [(m.step, m.value) for m in sorted(history, key=lambda m: (m.step, m.timestamp))]

    def model_versions(self, name: str) -> list[VersionRecord]:
        from components.tracking.registry import registered_versions

        return [VersionRecord(str(v.version), dict(v.tags or {}))
                for v in registered_versions(self.client, name)]

    def model_aliases(self, name: str) -> dict[str, str]:
        from components.tracking.registry import current_aliases

        return current_aliases(self.client, name)


def _record_of(run: Any) -> RunRecord:
    return RunRecord(run_id=run.info.run_id, run_name=run.info.run_name,
                     experiment_id=str(run.info.experiment_id), status=run.info.status,
                     params=dict(run.data.params), metrics=dict(run.data.metrics),
                     tags=dict(run.data.tags))
