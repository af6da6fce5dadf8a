"""One retraining at a time: an exclusive lock that a killed holder cannot leave behind.

`RunLock` is `fcntl.flock` on a file in the workspace (one machine); `DatabaseRunLock` is a
PostgreSQL advisory lock plus a row, for pods that share the cluster's database. For RunLock:
the lock is `fcntl.flock` on a file in the workspace. The kernel drops it when the holding
process dies, even under `kill -9`, so a stale lock is taken over by the next run without
any timeout guessing; the file's content (pid, host, start time) is only there to tell the
person at the terminal who holds it, or whose lock was taken over.

    with RunLock(workspace / "retrain.lock") as lock:
        if not lock.acquired:
            print(f"already running (since {lock.holder['since']}, pid {lock.holder['pid']})")
"""

from __future__ import annotations

import datetime
import fcntl
import json
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

from pipelines.config import Config


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """Context manager: `acquired` says whether this process holds the lock; `holder` is the
    current holder (when not acquired) or the stale previous one that was taken over."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.acquired = False
        self.took_over = False
        self.holder: dict[str, Any] = {}
        self._handle = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 (held open for the lock's lifetime)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.holder = self._read(handle)
            handle.close()
            return self
        self.holder = self._read(handle)
        self._handle = handle
        self.acquired = True
        # Content left behind means its writer died without releasing (a clean exit empties it).
        self.took_over = bool(self.holder)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(_this_process()))
        handle.flush()
        return self

    @staticmethod
    def _read(handle: Any) -> dict[str, Any]:
        handle.seek(0)
        content = handle.read().strip()
        try:
            return json.loads(content) if content else {}
        except ValueError:
            return {}

    def __exit__(self, *exc_info: object) -> None:
        if self._handle is not None:
            self._handle.seek(0)
            self._handle.truncate()
            self._handle.flush()
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def describe_holder(self) -> str:
        """`since 2026-11-30T01:02:03+00:00, pid 123 on host` for messages."""
        holder = self.holder
        alive = ""
        if holder.get("host") == socket.gethostname() and "pid" in holder:
            alive = "" if _pid_alive(int(holder["pid"])) else ", no longer running"
        return _describe(holder) + alive


class DatabaseRunLock:
    """The same lock for runs on different machines or pods that share one PostgreSQL
    database (the cluster's ML Metadata server, `kubernetes.metadata`).

    Exclusion is `pg_try_advisory_lock`, held by this process's database session.
    PostgreSQL releases it when the session ends, also when the process is killed (its
    connection closes), so a stale lock is taken over exactly like the file lock. The row
    `mptfx_run_locks(name)` says who holds it, and is left behind by a killed holder.

        with DatabaseRunLock("retrain/digits", host="mptfx-postgres", port=5432,
                             database="mlmd", user="mptfx", password=...) as lock:
            ...  # the same attributes as RunLock

    Raises:
        UsageError: naming the database when it cannot be reached (the caller exits 2).
    """

    TABLE = "mptfx_run_locks"

    def __init__(self, name: str, *, host: str, port: int, database: str, user: str,
                 password: str, connect_timeout: int = 10):
        self.name = name
        self.url = f"postgresql://{user}@{host}:{port}/{database}"
        self._params = {"host": host, "port": port, "dbname": database, "user": user,
                        "password": password, "connect_timeout": connect_timeout,
                        "application_name": "mptfx-lock",
                        # libpq TCP keepalives: a half-open connection (a node gone, a
                        # network cut) is noticed in ~1 min, so the server frees the lock
                        # instead of holding it for the kernel's 2-hour default.
                        "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                        "keepalives_count": 3}
        self.acquired = False
        self.took_over = False
        self.holder: dict[str, Any] = {}
        self._connection = None

    def __enter__(self) -> DatabaseRunLock:
        import psycopg2

        from components.errors import UsageError

        try:
            connection = psycopg2.connect(**self._params)
        except psycopg2.Error as error:
            detail = " ".join(str(error).split())
            raise UsageError(f"the lock database {self.url} cannot be reached: {detail}") \
                from None
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (self.name,))
            self.acquired = bool(cursor.fetchone()[0])
            if self.acquired:  # only the holder creates the table: no CREATE race
                cursor.execute(f"CREATE TABLE IF NOT EXISTS {self.TABLE} "
                               "(name text PRIMARY KEY, holder text NOT NULL)")
            self.holder = self._read(cursor)
            if not self.acquired:
                connection.close()
                return self
            self.took_over = bool(self.holder)
            cursor.execute(
                f"INSERT INTO {self.TABLE} (name, holder) VALUES (%s, %s) "
                "ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder",
                (self.name, json.dumps(_this_process())),
            )
        self._connection = connection
        return self

    def _read(self, cursor: Any) -> dict[str, Any]:
        import psycopg2

        try:
            cursor.execute(f"SELECT holder FROM {self.TABLE} WHERE name = %s", (self.name,))
        except psycopg2.errors.UndefinedTable:  # nobody has ever held it
            return {}
        row = cursor.fetchone()
        try:
            return json.loads(row[0]) if row else {}
        except ValueError:
            return {}

    def is_held(self) -> bool:
        """True while this lock's database session is alive (the lock is still ours).

        A PostgreSQL restart or a dropped connection ends the session and with it the
        advisory lock, so another run may already hold it.
        """
        import psycopg2

        if self._connection is None:
            return False
        try:
            with self._connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except psycopg2.Error:
            return False

    def __exit__(self, *exc_info: object) -> None:
        import psycopg2

        if self._connection is None:
            return
        try:
            with self._connection.cursor() as cursor:
                cursor.execute(f"DELETE FROM {self.TABLE} WHERE name = %s", (self.name,))
                cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", (self.name,))
        except psycopg2.Error as error:
            # The session is gone, and the lock with it; raising here would replace the
            # run's real result (its exit code, its own error) with this one.
            logging.getLogger(__name__).warning(
                "lock %s: the database session ended before release (%s); the server "
                "already freed the lock", self.name, " ".join(str(error).split()))
        finally:
            try:
                self._connection.close()
            except psycopg2.Error:
                pass
            self._connection = None

    def describe_holder(self) -> str:
        """`since …, pid 123 on pod-x` (+ `, no longer running` for a lock taken over)."""
        return _describe(self.holder) + (", no longer running" if self.took_over else "")


class LockHeartbeat:
    """Checks every `interval` seconds that `lock` is still held; calls `on_lost` once when
    it is not (its database session ended: the run must stop, another may have started).

        with DatabaseRunLock(...) as lock, LockHeartbeat(lock, 30, stop_the_run):
            ...
    """

    def __init__(self, lock: DatabaseRunLock, interval: float, on_lost: Any):
        self.lock, self.interval, self.on_lost = lock, interval, on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="mptfx-lock-heartbeat",
                                        daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.lock.is_held():
                self.on_lost()
                return

    def __enter__(self) -> LockHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def _describe(holder: dict[str, Any]) -> str:
    return (f"since {holder.get('since', '?')}, pid {holder.get('pid', '?')} "
            f"on {holder.get('host', '?')}")


def _this_process() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def cluster_run_lock(config: Config) -> DatabaseRunLock:
    """The lock every cluster run of the pipeline holds (`mptfx k8s submit`, `mptfx retrain
    --runner kubernetes` or `--lock database`): a PostgreSQL advisory lock plus a row in
    `kubernetes.metadata`'s database, password from MPTFX_MLMD_PASSWORD as in the pods."""
    from components.errors import UsageError
    from components.pod_env import PASSWORD_ENV

    database = config.kubernetes.metadata
    if database.engine != "postgresql":
        raise UsageError(f"the cluster run lock (mptfx k8s submit, mptfx retrain --runner "
                         f"kubernetes or --lock database) needs kubernetes.metadata.engine: "
                         f"postgresql. Received: engine={database.engine!r}")
    return DatabaseRunLock(
        f"retrain/{config.pipeline.name}", host=database.host, port=database.port,
        database=database.database, user=database.user,
        password=os.environ.get(PASSWORD_ENV, ""),
    )
