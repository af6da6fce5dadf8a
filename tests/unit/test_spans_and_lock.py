"""Spans are discovered and windowed like TFX's span convention; the lock admits one run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from components.ingest.listing import scan_span_folders
from pipelines.locking import DatabaseRunLock, RunLock
from pipelines.spans import discover_spans, select_data


def _drop(root, name, classes):
    for cls in classes:
        (root / name / cls).mkdir(parents=True)
        (root / name / cls / f"{cls}.png").write_bytes(b"x")


def test_latest_span_and_rolling_window(tmp_path):
    for span in (1, 2, 10):
        _drop(tmp_path, f"span-{span}", ["a", "b"])
    (tmp_path / "span-notes").mkdir()
    assert discover_spans(str(tmp_path)) == {1: "span-1", 2: "span-2", 10: "span-10"}
    latest = select_data(str(tmp_path))
    assert (latest.span, latest.span_dirs, latest.spans) == (10, ["span-10"], [10])
    window = select_data(str(tmp_path), window=2)
    assert window.span_dirs == ["span-2", "span-10"] and window.span == 10


def test_span_pattern_in_the_folder_name(tmp_path):
    for day in (20261128, 20261129):
        _drop(tmp_path, f"drop-{day}", ["a", "b"])
    chosen = select_data(str(tmp_path / "drop-{SPAN}"))
    assert chosen.root == str(tmp_path) and chosen.span == 20261129
    with pytest.raises(FileNotFoundError, match="no folder matching 'week-{SPAN}'"):
        select_data(str(tmp_path / "week-{SPAN}"))


def test_plain_folder_has_no_spans(tmp_path):
    _drop(tmp_path, "", ["a", "b"])
    plain = select_data(str(tmp_path))
    assert plain.span_dirs == [] and plain.span == 0 and plain.folders == [str(tmp_path)]


def test_window_of_spans_is_one_listing_with_the_union_of_classes(tmp_path):
    _drop(tmp_path, "span-1", ["cat", "dog"])
    _drop(tmp_path, "span-2", ["dog", "eel"])
    listing = scan_span_folders(tmp_path, ["span-1", "span-2"])
    assert listing.label_names == ["cat", "dog", "eel"]
    assert dict(zip(listing.files, listing.labels, strict=True)) == {
        "span-1/cat/cat.png": 0, "span-1/dog/dog.png": 1,
        "span-2/dog/dog.png": 1, "span-2/eel/eel.png": 2,
    }


def test_lock_is_exclusive_and_released(tmp_path):
    path = tmp_path / "retrain.lock"
    with RunLock(path) as first:
        assert first.acquired and not first.took_over
        with RunLock(path) as second:
            assert not second.acquired
            assert "pid" in second.describe_holder() and "since" in second.describe_holder()
    assert path.read_text() == ""
    with RunLock(path) as again:
        assert again.acquired and not again.took_over


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


# --- the database lock, against the real PostgreSQL that .ci/run starts --------------------


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
    port = _free_port()
    result = mptfx("retrain", "--lock", "database", "--workspace", str(tmp_path),
                   "--set", "kubernetes.metadata.host=127.0.0.1",
                   "--set", f"kubernetes.metadata.port={port}", timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"mptfx: error: the lock database postgresql://mptfx@127.0.0.1:{port}/mlmd cannot be "
        "reached")
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing written


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
