"""A fresh workspace's MLflow database copied from the template is the one MLflow makes.

Real MLflow (its SqlAlchemyStore and migrations) on sqlite files in tmp_path.
"""

import sqlite3

import pytest

from components.tracking import sqlite_seed
from components.tracking import store as store_lib

TIME_COLUMNS = {"creation_time", "last_update_time"}


def _content(path):
    """Schema and every row (but timestamps) of an sqlite database. Each statement's
    clauses are sorted: MLflow's own migrations emit a table's constraints in either order
    from one run to the next."""
    db = sqlite3.connect(path)
    schema = sorted(tuple(sorted(part.strip() for part in row[0].split(","))) for row in
                    db.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
    rows = {}
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        cursor = db.execute(f'SELECT * FROM "{table}"')
        names = [column[0] for column in cursor.description]
        rows[table] = sorted(
            tuple(value for name, value in zip(names, row, strict=True) if name not in TIME_COLUMNS)
            for row in cursor)
    db.close()
    return schema, rows


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MPTFX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_seeded_database_is_what_mlflow_migrates_itself(tmp_path, cache):
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    root = str(tmp_path / "artifacts")
    SqlAlchemyStore(f"sqlite:///{tmp_path / 'migrated.db'}", root).engine.dispose()
    assert sqlite_seed.seed(tmp_path / "seeded.db")
    SqlAlchemyStore(f"sqlite:///{tmp_path / 'seeded.db'}", root).engine.dispose()

    migrated, seeded = _content(tmp_path / "migrated.db"), _content(tmp_path / "seeded.db")
    assert seeded == migrated
    # The Default experiment points at this store's artifact root, not the template's.
    assert seeded[1]["experiments"][0][:3] == (0, "Default", f"{root}/0")
    assert sqlite_seed.template_path().exists()


def test_a_database_already_there_is_left_alone(tmp_path, cache):
    existing = tmp_path / "mlflow.db"
    existing.write_bytes(b"not mine to replace")
    assert not sqlite_seed.seed(existing)
    assert existing.read_bytes() == b"not mine to replace"


def test_an_unusable_cache_leaves_the_migration_to_mlflow(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("MPTFX_CACHE_DIR", str(tmp_path / "a-file"))
    client = store_lib.mlflow_client(f"sqlite:///{tmp_path / 'ws' / 'mlflow.db'}")
    assert [e.name for e in client.search_experiments()] == ["Default"]
