"""The whole ingest run: pick the source, decode with tf.data, split, write, quarantine."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from components.examples_format import DEFAULT_SHARD_MB, LABEL_NAMES_FIELD, labels_path
from components.faults import fault_point
from components.ingest.errors import DataError
from components.ingest.headers import SizeLimits
from components.ingest.reader import (
    ImagePolicy,
    resolve_channels,
)
from components.ingest.selection import DataSelection, select_folder
from components.ingest.sources import FolderSource, TFRecordSource
from components.ingest.splits import SplitAssigner, parse_split_ratios
from components.ingest.volume_source import VolumeSource
from components.ingest.walk import source_examples
from components.ingest.writer import SplitWriters, write_json

logger = logging.getLogger(__name__)

QUARANTINE_FILE = "quarantine.json"
INGEST_ENGINES = ("local", "beam")
_NAMED_IN_ERRORS = 3


@dataclass(frozen=True)
class IngestResult:
    """What one ingest run stored."""

    split_counts: dict[str, int]
    total: int
    quarantined: list[dict[str, str]]
    label_names: list[str]
    channels: int
    report_path: str


def open_source(selection: DataSelection,
                limits: SizeLimits | None = None) -> FolderSource | TFRecordSource | VolumeSource:
    """The reader of `selection`'s kind over its listing, for either engine: the local
    engine walks it, the Beam engine plans its shards from a FolderSource's listing.
    Nothing is listed or detected again here: the kind and the files are the selection's.

    Raises:
        DataError: the selection was never listed (no files).
    """
    listing = selection.listing
    if not listing.files:
        raise DataError(f"no files were listed for {selection.root}")
    if selection.kind == "volumes":  # volume/mask pairs for segmentation (volume_source.py)
        return VolumeSource(selection.root, listing, limits)
    if selection.kind == "tfrecords":
        return TFRecordSource([os.path.join(selection.root, listed.path)
                               for listed in listing.files], limits)
    return FolderSource(listing.image_listing(selection.root), limits)


def _quarantine_report(total: int, bad: list[dict[str, str]], max_bad_fraction: float,
                       ignored: Sequence[str] = ()) -> dict:
    return {
        "total": total,
        "bad": len(bad),
        "bad_fraction": len(bad) / total if total else 0.0,
        "max_bad_fraction": max_bad_fraction,
        "files": bad,
        # Non-image files (by extension), skipped as Keras does and not counted as bad.
        "ignored": list(ignored),
    }


def _too_many_bad(report: dict, data_root: str, report_path: str) -> DataError:
    first = report["files"][:_NAMED_IN_ERRORS]
    named = "; ".join(f"{entry['path']} ({entry['reason']})" for entry in first)
    more = len(report["files"]) - len(first)
    return DataError(
        f"{report['bad']} of {report['total']} files in {data_root} could not be ingested "
        f"(bad fraction {report['bad_fraction']:.4f} > "
        f"max_bad_fraction {report['max_bad_fraction']}): {named}"
        f"{f' and {more} more' if more else ''}; full list in {report_path}"
    )


def ingest(
    data: DataSelection | str | os.PathLike,
    examples_dir: str,
    report_path: str,
    *,
    splits: str | Mapping[str, float] = '{"train": 0.8, "eval": 0.2}',
    image_size: tuple[int, int] | None = None,
    resize_method: str = "stretch",
    channels: str = "auto",
    max_bad_fraction: float = 0.01,
    failure_report_path: str | None = None,
    limits: SizeLimits | None = None,
    jpeg_quality: int = 95,
    shard_mb: float = DEFAULT_SHARD_MB,
    engine: str = "local",
    beam_pipeline: object | None = None,
) -> IngestResult:
    """Ingest `data` (a listed `DataSelection`, or a folder, listed here: class folders,
    TFRecords or volumes) into `examples_dir` (the Examples URI).

    Writes `<examples_dir>/Split-<name>/data_tfrecord-<i>-of-<n>.gz` (shards of about
    `shard_mb` MB), `<examples_dir>/labels.json` and the quarantine report at
    `report_path`. Each image keeps its file's bytes unless its pixels must change
    (`reader.py`); re-encoded JPEGs use `jpeg_quality`. Images over
    `limits` (header pixels, file size) are quarantined without being decoded. When the run
    fails for too many bad files, the report is also copied to `failure_report_path`
    (somewhere the orchestrator does not delete with the failed outputs).

    `engine` "beam" runs the decode and the writes as a Beam pipeline (`beam_ingest.py`):
    on `beam_pipeline` (TFX's, from the Beam pipeline args) or, when None, on the local
    DirectRunner with one worker process per core. It writes the same Examples, counts and
    report; TFRecord and volume sources are always ingested by the local engine.

    Raises:
        DataError: bad input: see `list_data`, `parse_split_ratios`; more than
            `max_bad_fraction` of the files quarantined; or a split left empty.
        ValueError: an option outside its allowed values.
    """
    started = time.monotonic()
    if not 0.0 <= max_bad_fraction <= 1.0:
        raise ValueError(f"max_bad_fraction must be in [0, 1]. Received: {max_bad_fraction!r}")
    assign_split = SplitAssigner(parse_split_ratios(splits))
    # Build the policy now so a bad option fails before any slow work; channels come later.
    resolve_channels(channels, [])
    policy = ImagePolicy(3, image_size, resize_method, jpeg_quality)
    if engine not in INGEST_ENGINES:
        raise ValueError(f"engine must be one of {INGEST_ENGINES}. Received: {engine!r}")
    selection = data if isinstance(data, DataSelection) else select_folder(data)
    if engine == "beam" and selection.kind != "images":
        logger.warning("data.ingest_engine beam reads image folders; the TFRecord or volume "
                       "source %s is ingested by the local engine", selection.root)
        engine = "local"
    source = open_source(selection, limits)
    try:
        if engine == "beam" and isinstance(source, FolderSource):  # always, for images
            # Imported here: the local engine never loads Beam. The driver plans shards
            # from the listing; its header pass never starts (the workers check headers).
            from components.ingest.beam_ingest import ingest_on_beam

            logger.info("Ingest started on Beam: %d files from %s", len(source),
                        source.description)
            counts, bad, stats = ingest_on_beam(source.listing, channels, policy, assign_split,
                                                examples_dir, report_path, shard_mb, limits,
                                                beam_pipeline)
        else:
            logger.info("Ingest started: %d files from %s", len(source), source.description)
            counts, bad, stats = _write_examples(source, channels, policy, assign_split,
                                                 examples_dir, shard_mb)
    finally:
        if isinstance(source, FolderSource):
            source.close()  # a failed ingest stops its header pass
    write_json(labels_path(examples_dir), {LABEL_NAMES_FIELD: source.label_names})
    report = _quarantine_report(len(source), bad, max_bad_fraction, source.ignored)
    report["split_counts"] = counts
    write_json(report_path, report)
    _check_result(report, selection.root, report_path, failure_report_path)
    channels_stored = int(stats["channels"])
    _log_summary(counts, bad, channels_stored, time.monotonic() - started, stats)
    return IngestResult(counts, len(source), bad, source.label_names, channels_stored,
                        report_path)


def _check_result(report: dict, data_root: str, report_path: str,
                  failure_report_path: str | None) -> None:
    """Raise when too many files were quarantined or a split was left empty."""
    if report["bad_fraction"] > report["max_bad_fraction"]:
        if failure_report_path:
            write_json(failure_report_path, report)
        raise _too_many_bad(report, data_root, failure_report_path or report_path)
    counts = report["split_counts"]
    empty = [name for name, count in counts.items() if count == 0]
    if empty:
        raise DataError(
            f"split '{empty[0]}' is empty after hashing {report['total'] - report['bad']} "
            f"usable files from {data_root} into {counts}; add data or raise its ratio"
        )


def _write_examples(
    source: FolderSource | TFRecordSource | VolumeSource,
    channels: str,
    policy: ImagePolicy,
    assign_split: SplitAssigner,
    examples_dir: str,
    shard_mb: float,
) -> tuple[dict[str, int], list[dict[str, str]], dict[str, object]]:
    """Write every usable element to its split (the local engine); returns split counts,
    quarantined files, and the shard counts, number of re-encoded images and channels."""
    if channels == "auto":
        # "auto" needs the channel count before the first image is written; the headers
        # read by the size check tell it without decoding anything, and the first colour
        # image settles it (an all-gray set waits for every header).
        policy = replace(policy, channels=resolve_channels(channels, source.native_channels()))
    else:
        policy = replace(policy, channels=int(channels))
    bad: list[dict[str, str]] = []
    reencoded = 0
    with SplitWriters(examples_dir, assign_split.names, shard_mb) as writers:
        for index, split, result, was_reencoded in source_examples(source, policy, assign_split):
            if split is None:
                bad.append(result)
                continue
            reencoded += was_reencoded
            writers.write_record(split, result)
            if index == len(source) // 2:
                fault_point("ingest")
    return dict(writers.counts), bad, {"shards": writers.shard_counts(), "reencoded": reencoded,
                                       "channels": policy.channels}


def _log_summary(
    counts: dict[str, int], bad: list[dict[str, str]], channels: int, seconds: float,
    stats: dict[str, object],
) -> None:
    per_split = " ".join(f"{name}={count}" for name, count in counts.items())
    shards = " ".join(f"{name}={count}" for name, count in stats["shards"].items())
    quarantined = ", ".join(entry["path"] for entry in bad[:_NAMED_IN_ERRORS])
    logger.info(
        "Ingest finished in %.1f s: %s in shards %s (channels=%d, %d re-encoded, the rest "
        "kept as their files' bytes); quarantined %d%s",
        seconds,
        per_split,
        shards,
        channels,
        stats["reencoded"],
        len(bad),
        f": {quarantined}" if bad else "",
    )
