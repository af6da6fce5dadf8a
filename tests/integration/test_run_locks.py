"""The run locks against what they guard against: a killed holder process, the real PostgreSQL
that .ci/run starts, an unreachable lock database named in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from pipelines.locking import DatabaseRunLock, RunLock
from tests.ports import free_port


def test_lock_of_a_killed_process_is_taken_over(tmp_path):
    path = tmp_path / "retrain.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pipelines.locking import DatabaseRunLock, RunLock\n"
        f"lock = RunLock({str(path)!r}).__enter__()\n"
        "print('held', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with RunLock(path) as blocked:
        assert not blocked.acquired
    holder.kill()
    holder.wait()
    with RunLock(path) as taker:
        assert taker.acquired and taker.took_over
        assert "no longer running" in taker.describe_holder()
        assert json.loads(path.read_text())["pid"] != holder.pid


def _db_lock(postgres, name="retrain/digits"):
    return DatabaseRunLock(name, host=postgres["host"], port=postgres["port"],
                           database=postgres["database"], user=postgres["user"],
                           password=postgres["password"])


def test_database_lock_is_exclusive_per_name_and_released(postgres):
    with _db_lock(postgres) as first:
        assert first.acquired and not first.took_over
        with _db_lock(postgres) as second:
            assert not second.acquired
            assert f"pid {os.getpid()}" in second.describe_holder()
        with _db_lock(postgres, "retrain/other-pipeline") as other:
            assert other.acquired
    with _db_lock(postgres) as again:
        assert again.acquired and not again.took_over


def test_database_lock_of_a_killed_process_is_taken_over(postgres):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from pipelines.locking import DatabaseRunLock\n"
        f"lock = DatabaseRunLock('retrain/killed', host={postgres['host']!r}, "
        f"port={postgres['port']}, database={postgres['database']!r}, "
        f"user={postgres['user']!r}, password={postgres['password']!r}).__enter__()\n"
        "print('held', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with _db_lock(postgres, "retrain/killed") as blocked:
        assert not blocked.acquired and f"pid {holder.pid}" in blocked.describe_holder()
    holder.kill()
    holder.wait()
    for _ in range(50):  # the server notices the closed connection within milliseconds
        with _db_lock(postgres, "retrain/killed") as taker:
            if taker.acquired:
                break
        time.sleep(0.1)
    assert taker.acquired and taker.took_over
    assert f"pid {holder.pid}" in taker.describe_holder()
    assert "no longer running" in taker.describe_holder()


def test_retrain_names_an_unreachable_lock_database_and_exits_2(mptfx, tmp_path):
    port = free_port()
    result = mptfx("retrain", "--lock", "database", "--workspace", str(tmp_path),
                   "--set", "kubernetes.metadata.host=127.0.0.1",
                   "--set", f"kubernetes.metadata.port={port}", timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"mptfx: error: the lock database postgresql://mptfx@127.0.0.1:{port}/mlmd cannot be "
        "reached")
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing written


def _end_session(postgres, application_name="mptfx-lock"):
    """What a PostgreSQL restart does to the lock holder's session: terminate it."""
    import psycopg2

    connection = psycopg2.connect(host=postgres["host"], port=postgres["port"],
                                  dbname=postgres["database"], user=postgres["user"],
                                  password=postgres["password"])
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE application_name = %s AND datname = %s",
                       (application_name, postgres["database"]))
    connection.close()


def test_a_lost_lock_session_is_noticed_and_release_does_not_hide_the_result(postgres):
    import threading

    from pipelines.locking import LockHeartbeat

    lost = threading.Event()
    with pytest.raises(RuntimeError, match="the run's own error"):
        with _db_lock(postgres, "retrain/lost") as lock:
            with LockHeartbeat(lock, 0.1, lost.set):
                assert lock.is_held() and not lost.wait(0.5)
                _end_session(postgres)
                assert lost.wait(10), "the heartbeat did not notice the ended session"
            assert not lock.is_held()
            # Leaving the block releases on a dead connection: the run's own error wins.
            raise RuntimeError("the run's own error")
    with _db_lock(postgres, "retrain/lost") as again:
        assert again.acquired
