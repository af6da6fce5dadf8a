"""The commands that only read state answer without TensorFlow or MLflow: `mptfx --help`,
`mptfx serve status` and `mptfx compare` (before and after, with `python -X importtime`:
docs/guide/tracking.md). A test of what they import, not of how long they take: each runs in a
process of its own, which writes the modules it imported when it exits."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RUN_DIR
from tests.run_summaries import fake_summary

# A process imports TensorFlow (4.9 s), Keras, TFX, Beam or MLflow (2.1 s, with SQLAlchemy
# and pandas) only to train, evaluate, publish or write to MLflow.
HEAVY = ("tensorflow", "keras", "tfx", "apache_beam", "mlflow", "sqlalchemy", "pandas")
# `mptfx ARGS` as the console script runs it; at exit, the names of the modules it imported.
DRIVER = ("import atexit, json, sys\n"
          "atexit.register(lambda: open(sys.argv[1], 'w').write(json.dumps(sorted(sys.modules))))\n"
          "from pipelines.cli import main\n"
          "sys.exit(main(sys.argv[2:]))\n")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A workspace as a run leaves it: an MLflow store holding a run (recorded by MLflow
    itself) and its champion, and the models.config that serves that version."""
    from components import tracking
    from components.serving.rollout import record_push
    from components.tracking.store import TrackingStore, local_store_uri

    root = tmp_path_factory.mktemp("read-only")
    summary = fake_summary(root)
    Path(summary.summary_path).parent.mkdir(parents=True, exist_ok=True)
    store = TrackingStore(uri=local_store_uri(root), requested_uri="", workspace=root,
                          experiment="imports", model_name="digits")
    tracking.log_run(store, summary, io.StringIO())
    record_push(str(root / "serving"), "digits", 3, "direct")
    return root


def _imported_by(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    modules = tmp_path / "modules.json"
    result = subprocess.run([sys.executable, "-c", DRIVER, str(modules), *args], cwd=RUN_DIR,
                            capture_output=True, text=True, timeout=120)
    return result, json.loads(modules.read_text())


@pytest.mark.parametrize("argv, answer", [
    (["--help"], "serve"),
    (["serve", "status", "--workspace", "{ws}"], "champion"),
    (["compare", "--workspace", "{ws}", "--out", "{tmp}"], "digits v1"),
], ids=["help", "serve-status", "compare"])
def test_read_only_commands_import_neither_tensorflow_nor_mlflow(workspace, tmp_path, argv,
                                                                 answer):
    args = [arg.format(ws=workspace, tmp=tmp_path) for arg in argv]
    result, modules = _imported_by(tmp_path, *args)
    assert result.returncode == 0, result.stderr
    assert answer in result.stdout
    heavy = sorted({name for name in modules if name.split(".")[0] in HEAVY})
    assert heavy == [], f"mptfx {argv[0]} imported {heavy[:10]}"
