"""The Beam Ingest (data.ingest_engine: beam) on two DirectRunner worker processes writes
the Examples, counts and quarantine report the local engine writes (issue 23, item 3)."""

from __future__ import annotations

import io
import json
import logging
from dataclasses import replace
from pathlib import Path

import apache_beam as beam
import numpy as np
import tensorflow as tf
from PIL import Image

from components.examples_format import LABELS_FILE
from components.ingest.ingest import ingest
from components.ingest.selection import select_folder, stage_listing
from pipelines.config import load_config

TWO_WORKERS = [
    "--direct_running_mode=multi_processing",
    "--direct_num_workers=2",
    "--allow_unsafe_triggers",
]
SPLITS = {"train": 0.75, "eval": 0.25}


def _image(rng: np.random.Generator, mode: str, fmt: str) -> bytes:
    size = tuple(int(side) for side in rng.integers(12, 40, 2))
    shape = size if mode == "L" else (*size, len(mode))
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(buffer, fmt)
    return buffer.getvalue()


def _folder(root: Path, classes=("circle", "square", "star"), per_class=16) -> Path:
    """48 small PNG/JPEG images (gray, RGB, RGBA) in 3 classes, 2 corrupt files, 1 non-image."""
    rng = np.random.default_rng(23)
    kinds = [("L", "PNG", "png"), ("RGB", "JPEG", "jpg"), ("RGBA", "PNG", "png")]
    for name in classes:
        (root / name).mkdir(parents=True)
        for index in range(per_class):
            mode, fmt, suffix = kinds[index % len(kinds)]
            (root / name / f"img_{index:03d}.{suffix}").write_bytes(_image(rng, mode, fmt))
    (root / classes[0] / "truncated.png").write_bytes(_image(rng, "RGB", "PNG")[:60])
    (root / classes[1] / "not_a_photo.jpg").write_bytes(b"this is a text file, not a JPEG")
    (root / classes[-1] / "notes.txt").write_text("ignored, not counted as bad")
    return root


def _examples(examples_dir: Path) -> dict[str, list[bytes]]:
    """Each split's Examples, serialized canonically (a feature map's order is not fixed
    across processes) and sorted (shard boundaries and order may differ)."""
    splits = {}
    for folder in sorted(examples_dir.glob("Split-*")):
        shards = sorted(str(path) for path in folder.glob("data_tfrecord-*-of-*.gz"))
        records = tf.data.TFRecordDataset(shards, compression_type="GZIP")
        splits[folder.name] = sorted(
            tf.train.Example.FromString(record.numpy()).SerializeToString(deterministic=True)
            for record in records)
    return splits


def _run(data: Path, out: Path, engine: str, max_bad_fraction: float = 0.1,
         span_dirs: tuple[str, ...] = (), **options):
    report = out / "quarantine" / "quarantine.json"
    pipeline = beam.Pipeline(argv=TWO_WORKERS) if engine == "beam" else None
    result = ingest(select_folder(data, span_dirs), str(out / "examples"), str(report),
                    splits=SPLITS, max_bad_fraction=max_bad_fraction, engine=engine,
                    beam_pipeline=pipeline, **options)
    return result, json.loads(report.read_text()), out / "examples"


def test_two_beam_workers_write_what_one_local_ingest_writes(tmp_path, caplog):
    # Shards of 4 KB: several per split, so both workers get some. channels auto is 3
    # (RGB and RGBA files), so the gray files are stored as RGB and the RGBA re-encoded.
    options = {"shard_mb": 0.004}
    data = _folder(tmp_path / "shapes")
    local, local_report, local_dir = _run(data, tmp_path / "local", "local", **options)
    with caplog.at_level(logging.INFO, logger="components.ingest.beam_ingest"):
        beam_result, beam_report, beam_dir = _run(data, tmp_path / "beam", "beam", **options)

    assert _examples(beam_dir) == _examples(local_dir)
    assert sum(len(rows) for rows in _examples(beam_dir).values()) == 48
    assert replace(beam_result, report_path=local.report_path) == local
    assert beam_report == local_report
    assert [entry["path"] for entry in beam_report["files"]] == [
        "circle/truncated.png", "square/not_a_photo.jpg"]
    assert beam_report["ignored"] == ["star/notes.txt"]
    assert (beam_dir / LABELS_FILE).read_text() == (local_dir / LABELS_FILE).read_text()
    # Shards carry the local writer's names, and nothing half-written is left behind.
    names = sorted(p.name for p in (beam_dir / "Split-train").iterdir())
    assert names and all(n.startswith("data_tfrecord-") and n.endswith(".gz") for n in names)
    assert not list((tmp_path / "beam").rglob("*.partial"))
    assert not (tmp_path / "beam" / "quarantine" / ".beam-ingest").exists()
    assert beam_result.channels == 3 and len(names) > 2
    # Both worker processes wrote shards (measured, not assumed).
    assert "written by 2 worker processes" in caplog.text


def test_two_beam_workers_ingest_a_window_of_span_folders_as_local_does(tmp_path):
    root = tmp_path / "drops"
    _folder(root / "span-1", classes=("circle", "square"), per_class=8)
    _folder(root / "span-2", classes=("circle", "square"), per_class=8)
    spans = {"span_dirs": ("span-1", "span-2"), "channels": "1", "max_bad_fraction": 0.2}
    local, local_report, local_dir = _run(root, tmp_path / "local", "local", **spans)
    beam_result, beam_report, beam_dir = _run(root, tmp_path / "beam", "beam", **spans)
    assert _examples(beam_dir) == _examples(local_dir)
    assert beam_report == local_report
    assert [entry["path"] for entry in beam_report["files"]] == [
        "span-1/circle/truncated.png", "span-1/square/not_a_photo.jpg",
        "span-2/circle/truncated.png", "span-2/square/not_a_photo.jpg"]
    assert replace(beam_result, report_path=local.report_path) == local
    assert sum(local.split_counts.values()) == 32 and local.channels == 1


def test_the_beam_ingest_engine_gets_a_worker_per_core_only_when_beam_runs_in_process(tmp_path):
    # data.ingest_engine reaches the Ingest; in process (no pipeline.beam_pipeline_args)
    # its Beam options come after the pipeline's in-memory ones, so they win.
    from components.ingest.beam_ingest import LOCAL_INGEST_BEAM_ARGS
    from components.ingest.selection import DataSelection
    from pipelines.pipeline import create_pipeline
    from pipelines.workspace import Workspace

    data = tmp_path / "data"
    for name in ("a", "b"):
        (data / name).mkdir(parents=True)
    selection, workspace = DataSelection(str(data)), Workspace(tmp_path / "ws")

    def ingest_of(*overrides):
        config = load_config("configs/local.yaml", ["pipeline.name=t", *overrides])
        return create_pipeline(config, workspace, selection).components[0]

    on_beam = ingest_of("data.ingest_engine=beam")
    assert on_beam.exec_properties["ingest_engine"] == "beam"
    assert on_beam.executor_spec.beam_pipeline_args[-3:] == LOCAL_INGEST_BEAM_ARGS
    assert ingest_of().exec_properties["ingest_engine"] == "local"
    assert "--direct_running_mode=multi_processing" not in \
        ingest_of().executor_spec.beam_pipeline_args
    flink = ingest_of("data.ingest_engine=beam", "pipeline.beam_pipeline_args=[--runner=X]")
    assert flink.executor_spec.beam_pipeline_args[-1] == "--runner=X"


def test_the_ingest_component_runs_on_the_beam_pipeline_tfx_gives_it(tmp_path):
    # The TFX component as a pipeline runs it: TFX builds the Beam pipeline from the
    # component's Beam args (two worker processes here) and the Examples artifact is whole.
    from ml_metadata.metadata_store import metadata_store
    from tfx import v1 as tfx

    from components.ingest.component import ImageExampleGen

    data = _folder(tmp_path / "shapes", classes=("circle", "square"), per_class=10)
    selection = replace(stage_listing(select_folder(data), tmp_path / "root"), span=2)
    node = ImageExampleGen(data_selection=selection.parameter(), ingest_engine="beam",
                           max_bad_fraction=0.2, splits='{"train": 0.75, "eval": 0.25}',
                           ).with_beam_pipeline_args(TWO_WORKERS)
    metadata = tfx.orchestration.metadata.sqlite_metadata_connection_config(
        str(tmp_path / "metadata.sqlite"))
    tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
        pipeline_name="beam-ingest", pipeline_root=str(tmp_path / "root"), components=[node],
        metadata_connection_config=metadata))
    store = metadata_store.MetadataStore(metadata)
    (examples,) = store.get_artifacts_by_type("Examples")
    (quarantine,) = store.get_artifacts_by_type("mptfx.QuarantineReport")
    report = json.loads((Path(quarantine.uri) / "quarantine.json").read_text())
    written = _examples(Path(examples.uri))
    assert {name: len(rows) for name, rows in written.items()} == {
        f"Split-{name}": count for name, count in report["split_counts"].items()}
    assert sum(report["split_counts"].values()) == 20 and report["bad"] == 2
    assert examples.custom_properties["span"].int_value == 2
    assert json.loads((Path(examples.uri) / LABELS_FILE).read_text())["label_names"] == [
        "circle", "square"]
