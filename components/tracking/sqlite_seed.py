"""A fresh workspace's MLflow database, copied from one MLflow migrated once on this machine.

Creating an sqlite MLflow store runs every schema migration MLflow ships (about 5 s of
Python here, on every fresh workspace). `seed(path)` copies an empty database that MLflow
itself created and migrated instead: the cache holds one per MLflow version, without the
Default experiment (its artifact location depends on the opening process), which MLflow
adds when it opens the copy, as it does for a database it migrated itself. Anything that
goes wrong here leaves the path alone, and MLflow then migrates as before.

    seed(Path("workspace/mlflow.db"))   # before MlflowClient("sqlite:///workspace/mlflow.db")

The cache folder: MPTFX_CACHE_DIR, else $XDG_CACHE_HOME/mptfx, else ~/.cache/mptfx.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from pathlib import Path

logger = logging.getLogger("mptfx")
DEFAULT_EXPERIMENT_ID = 0


def cache_dir() -> Path:
    if os.environ.get("MPTFX_CACHE_DIR"):
        return Path(os.environ["MPTFX_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mptfx"


def template_path() -> Path:
    import mlflow

    return cache_dir() / f"mlflow-{mlflow.__version__}-empty.db"


def seed(path: Path) -> bool:
    """Copy the migrated empty database to `path` unless something is there; True when
    it did."""
    if path.exists():
        return False
    try:
        template = template_path()
        if not template.exists():
            _create_template(template)
        temporary = path.with_name(f".{path.name}.seed-{os.getpid()}")
        try:  # a copy cut short (a full disk) is removed too
            shutil.copyfile(template, temporary)
            os.link(temporary, path)  # never over a database another process just made
        except FileExistsError:
            return False
        finally:
            temporary.unlink(missing_ok=True)
        return True
    except Exception:  # MLflow creates and migrates the database itself
        logger.debug("seeding %s from the MLflow template failed", path, exc_info=True)
        return False


def _create_template(template: Path) -> None:
    """Let MLflow create and migrate a database, then drop its Default experiment."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    template.parent.mkdir(parents=True, exist_ok=True)
    temporary = template.with_name(f".{template.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    store = SqlAlchemyStore(f"sqlite:///{temporary}", str(template.parent / "unused"))
    store.engine.dispose()
    with sqlite3.connect(temporary) as db:
        db.execute("DELETE FROM experiment_tags WHERE experiment_id = ?",
                   (DEFAULT_EXPERIMENT_ID,))
        db.execute("DELETE FROM experiments WHERE experiment_id = ?", (DEFAULT_EXPERIMENT_ID,))
    os.replace(temporary, template)
