"""Where everything a run writes lives: one folder, by default `./workspace`."""

from __future__ import annotations

import datetime
import secrets
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Workspace:
    """The layout of a workspace folder; every path is derived from `root`.

        ws = Workspace(Path("workspace"))
        ws.serving_dir("digits")  # workspace/serving/digits  (TF Serving's model_base_path)
    """

    root: Path

    @property
    def metadata_path(self) -> Path:
        """ML Metadata's sqlite database (the embedded default)."""
        return self.root / "metadata.db"

    @property
    def builtin_data_dir(self) -> Path:
        return self.root / "data" / "digits"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def pipeline_root(self, pipeline_name: str) -> Path:
        """TFX's pipeline root: every component's output artifacts."""
        return self.root / "tfx" / pipeline_name

    def serving_dir(self, model_name: str, serving_root: str = "") -> str:
        """`<serving_root or workspace/serving>/<model_name>`: integer versions go below."""
        base = serving_root or str(self.root / "serving")
        return f"{base.rstrip('/')}/{model_name}"

    def tflite_dir(self, model_name: str) -> Path:
        return self.root / "tflite" / model_name

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / run_id


def new_run_id() -> str:
    """A new run's id, e.g. `20250301-142233-3fa9`: sortable by start time, unique enough
    for runs started in the same second (the name of `runs/<run id>`)."""
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
