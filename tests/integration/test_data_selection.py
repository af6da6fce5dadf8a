"""The data source decided once (issue 35): a run lists each folder of its data exactly once,
in `resolve_data`; the Ingest, run by TFX's own launcher as every runner runs it, ingests that
listing without listing anything, on either engine; and TFX's cache keeps the Examples of
unchanged data and ingests again when a file changes.

Listings are counted at the operating system's edge: every directory read through
os.scandir, os.listdir, Path.iterdir/glob and tf.io.gfile in this process (the Beam engine
runs in process here, so its workers are counted too).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from PIL import Image

from components.examples_format import COMPRESSION, DEPTH_KEY, MASK_KEY
from components.ingest.errors import DataError
from components.ingest.selection import load_selection
from pipelines.config import load_config
from pipelines.data_source import resolve_data
from pipelines.local_runner import compile_pipeline, launch_node
from pipelines.pipeline import create_pipeline
from pipelines.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]
IN_PROCESS_BEAM = "[--direct_running_mode=in_memory, --direct_num_workers=1, " \
                  "--allow_unsafe_triggers, --requirements_file=/dev/null]"


def _photos(root: Path) -> Path:
    """Two classes of small RGB PNGs (one in a nested folder), a note and a hidden folder."""
    rng = np.random.default_rng(35)
    for relative in [f"cat/img_{i}.png" for i in range(8)] + \
            [f"dog/img_{i}.png" for i in range(6)] + ["dog/night/img_9.png"]:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)).save(root / relative)
    (root / "cat" / "notes.txt").write_text("ignored, reported")
    (root / ".cache").mkdir()
    (root / ".cache" / "x.png").write_bytes(b"hidden: never read")
    return root


def _count_folder_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every directory read from now on, by real path."""
    reads: Counter[str] = Counter()

    def counted(read, path_of=lambda *args, **kwargs: args[0] if args else "."):
        def wrapper(*args, **kwargs):
            path = path_of(*args, **kwargs)
            if not isinstance(path, int):  # a folder opened by descriptor (shutil.rmtree)
                reads[os.path.realpath(os.fspath(path))] += 1
            return read(*args, **kwargs)
        return wrapper

    parent = lambda pattern, *_, **__: os.path.dirname(os.fspath(pattern)) or "."  # noqa: E731
    monkeypatch.setattr(os, "scandir", counted(os.scandir))
    monkeypatch.setattr(os, "listdir", counted(os.listdir))
    monkeypatch.setattr(Path, "iterdir", counted(Path.iterdir))
    monkeypatch.setattr(Path, "glob", counted(Path.glob))
    monkeypatch.setattr(Path, "rglob", counted(Path.rglob))
    monkeypatch.setattr(tf.io.gfile, "listdir", counted(tf.io.gfile.listdir))
    monkeypatch.setattr(tf.io.gfile, "walk", counted(tf.io.gfile.walk))
    monkeypatch.setattr(tf.io.gfile, "glob", counted(tf.io.gfile.glob, parent))
    return reads


def _folders(root: Path) -> set[str]:
    """The data's visible folders (the hidden ones are pruned, never read)."""
    found = set()
    for folder, dirnames, _ in os.walk(root):
        dirnames[:] = [name for name in dirnames if not name.startswith(".")]
        found.add(os.path.realpath(folder))
    return found


def _config(tmp_path: Path, *overrides: str):
    return load_config(REPO / "configs/local.yaml", ["pipeline.name=once", *overrides])


def _run_ingest(config, workspace: Workspace, data, run_id: str):
    pipeline = create_pipeline(config, workspace, data)
    launch_node(compile_pipeline(pipeline, run_id), "Ingest")
    return metadata_store.MetadataStore(pipeline.metadata_connection_config)


@pytest.mark.parametrize("engine", ["local", "beam"])
def test_a_run_lists_each_data_folder_once_and_the_ingest_lists_none(tmp_path, monkeypatch,
                                                                     engine):
    data = _photos(tmp_path / "photos")
    config = _config(tmp_path, f"data.ingest_engine={engine}",
                     f"pipeline.beam_pipeline_args={IN_PROCESS_BEAM}")
    workspace = Workspace(tmp_path / "ws")
    reads = _count_folder_reads(monkeypatch)

    selection = resolve_data(config, workspace, str(data))
    data_reads = {folder: count for folder, count in reads.items()
                  if folder.startswith(os.path.realpath(data))}
    assert data_reads == dict.fromkeys(_folders(data), 1)
    assert selection.kind == "images" and len(selection.listing.files) == 16

    reads.clear()
    store = _run_ingest(config, workspace, selection, "r1")
    assert not [folder for folder in reads if folder.startswith(os.path.realpath(data))]
    (examples,) = store.get_artifacts_by_type("Examples")
    assert examples.custom_properties["input_fingerprint"].string_value == \
        selection.fingerprint
    (quarantine,) = store.get_artifacts_by_type("mptfx.QuarantineReport")
    report = json.loads((Path(quarantine.uri) / "quarantine.json").read_text())
    assert (report["total"], report["bad"], report["ignored"]) == (15, 0, ["cat/notes.txt"])
    assert sum(report["split_counts"].values()) == 15


def test_unchanged_data_keeps_the_cached_ingest_and_a_touched_file_ingests_again(tmp_path):
    data = _photos(tmp_path / "photos")
    config, workspace = _config(tmp_path), Workspace(tmp_path / "ws")
    first = resolve_data(config, workspace, str(data))
    # The parameter ML Metadata stores with each execution stays small: the files are in
    # the listing file it names (by the sha256 of its content).
    assert len(first.parameter()) < 600 and Path(first.listing_uri).exists()
    _run_ingest(config, workspace, first, "r1")

    same = resolve_data(config, workspace, str(data))
    assert same.parameter() == first.parameter()
    _run_ingest(config, workspace, same, "r2")

    touched = data / "dog" / "img_0.png"
    stat = touched.stat()
    os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    changed = resolve_data(config, workspace, str(data))
    assert changed.parameter() != first.parameter()
    store = _run_ingest(config, workspace, changed, "r3")

    states = [metadata_store_pb2.Execution.State.Name(execution.last_known_state)
              for execution in sorted(store.get_executions(), key=lambda e: e.id)]
    assert states == ["COMPLETE", "CACHED", "COMPLETE"]
    assert len(store.get_artifacts_by_type("Examples")) == 2


def test_the_ingest_refuses_a_listing_that_changed_or_is_gone(tmp_path):
    data = _photos(tmp_path / "photos")
    selection = resolve_data(_config(tmp_path), Workspace(tmp_path / "ws"), str(data))
    assert load_selection(selection.parameter()).listing == selection.listing
    listing = Path(selection.listing_uri)
    edited = gzip.decompress(listing.read_bytes()).replace(b"img_1.png", b"img_9.png")
    listing.write_bytes(gzip.compress(edited))
    with pytest.raises(DataError, match=f"the data listing {listing} changed after it was "
                                        "written; run the pipeline again"):
        load_selection(selection.parameter())
    listing.unlink()
    with pytest.raises(DataError, match=f"cannot read the data listing {listing}"):
        load_selection(selection.parameter())


def test_synthetic_volumes_are_exported_once_and_ingested_with_their_masks(tmp_path):
    """`data.source: synthetic:volumes` (the e2e tier trains the U-Net on a user's own
    volume folder, tests/e2e/test_user_volumes_e2e.py, with the same Dice-gated Evaluator):
    the cubes and spheres are written into the workspace at the model's slice size as one
    TFRecord file, listed, and the real Ingest makes an example of every volume, its mask
    kept; a second run reuses the export."""
    config = _config(tmp_path, "data.source=synthetic:volumes", "model.name=unet3d",
                     "model.input_size=[8,8]", "data.builtin_per_class=6")
    workspace = Workspace(tmp_path / "ws")

    selection = resolve_data(config, workspace, None)
    assert selection.kind == "tfrecords"
    assert Path(selection.root).is_relative_to(tmp_path / "ws")
    (exported,) = selection.listing.files
    assert os.stat(os.path.join(selection.root, exported.path)).st_mtime_ns == exported.mtime_ns
    assert resolve_data(config, workspace, None).fingerprint == selection.fingerprint

    _run_ingest(config, workspace, selection, "v1")
    examples = [tf.train.Example.FromString(record.numpy()) for record in tf.data.TFRecordDataset(
        sorted(str(path) for path in (tmp_path / "ws").rglob("Split-*/*.gz")),
        compression_type=COMPRESSION)]
    assert len(examples) == 2 * 6
    for example in examples:
        features = example.features.feature
        assert features[DEPTH_KEY].int64_list.value == [8]
        assert len(features[MASK_KEY].int64_list.value) == 8 * 8 * 8
