"""The Ingest as a Beam pipeline (`data.ingest_engine: beam`), as TFX's ImportExampleGen runs.

The driver takes the run's one listing (`selection.py`: names and sizes, nothing is listed
again) and plans the shards: every file's split is `SplitAssigner` of its relative path,
the same function the local engine calls, and each split's files are cut, in listing order,
into shards of about `data.shard_mb` MB of file bytes (the Examples keep each file's bytes,
so a shard's Examples are about as large). The plans -- file names only -- are the
pipeline's input; each worker then checks the headers, decodes and writes one whole shard
with the local engine's own code (`FolderSource`, `walk.source_examples`), streaming: a
worker holds one shard's tf.data prefetch buffer and one record at a time, never the data
set.

    plans ──(channels: auto)──> header pass ──> channel count (side input)
      └───────────────────────> WriteShard ──> Split-<name>/data_tfrecord-<i>-of-<n>.gz
                                      └─ tagged "quarantined" ──> one summary file

Shards are written by the workers, not by `beam.io.WriteToTFRecord`: with a fixed shard
count that transform routes every record through a GroupByKey, which the DirectRunner holds
in memory (the whole data set) and a cluster runner shuffles over the network. A shard is
written as `<name>.partial` and renamed when complete, as the local writer does, so a
retried or killed worker leaves no file a reader takes as whole.

The quarantined files and the per-shard counts come back through one small JSON file beside
the quarantine report, which the driver reads and removes; `ingest.py` then writes the same
labels.json and quarantine report as for the local engine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import apache_beam as beam
import tensorflow as tf

from components.examples_format import COMPRESSION, PARTIAL_SUFFIX, shard_name, split_dir
from components.ingest.headers import SizeLimits
from components.ingest.listing import ImageListing
from components.ingest.reader import ImagePolicy, resolve_channels
from components.ingest.sources import FolderSource
from components.ingest.splits import SplitAssigner
from components.ingest.walk import source_examples

logger = logging.getLogger(__name__)

# The Ingest's own Beam options when the pipeline runs Beam in process (pipeline.beam_pipeline_
# args empty): the DirectRunner with one worker process per core (0 = cpu_count), so every
# core decodes. `--allow_unsafe_triggers` keeps it off the PrismRunner (a download at run
# time), as the other Beam components' local options do (pipelines/pipeline.py).
LOCAL_INGEST_BEAM_ARGS = [
    "--direct_running_mode=multi_processing",
    "--direct_num_workers=0",
    "--allow_unsafe_triggers",
]
SUMMARY_DIR = ".beam-ingest"
_QUARANTINED = "quarantined"
_MB = 2**20


@dataclass(frozen=True)
class ShardPlan:
    """One shard to write: files (relative to `root`) with their labels and listing positions."""

    split: str
    index: int
    count: int
    files: tuple[str, ...]
    labels: tuple[int, ...]
    positions: tuple[int, ...]  # each file's index in the listing: the report's order

    def listing(self, root: str, label_names: Sequence[str]) -> ImageListing:
        return ImageListing(root, list(self.files), list(self.labels), list(label_names))


def plan_shards(listing: ImageListing, assign_split: SplitAssigner,
                shard_mb: float) -> list[ShardPlan]:
    """Each split's files, in listing order, in shards of about `shard_mb` MB of file bytes
    (the sizes the listing holds: no file is stat'ed again).

    A split without files gets one (empty) shard, as the local writer leaves one.
    """
    if not shard_mb > 0:
        raise ValueError(f"shard_mb must be > 0. Received: shard_mb={shard_mb!r}")
    if len(listing.sizes) != len(listing.files):
        raise ValueError(f"the listing of {listing.root} has no file sizes to plan shards by")
    limit = shard_mb * _MB
    groups: dict[str, list[list[int]]] = {name: [[]] for name in assign_split.names}
    filled = dict.fromkeys(assign_split.names, 0)
    for position, (relative, size) in enumerate(zip(listing.files, listing.sizes,
                                                    strict=True)):
        split = assign_split(relative)
        if groups[split][-1] and filled[split] + size > limit:
            groups[split].append([])
            filled[split] = 0
        groups[split][-1].append(position)
        filled[split] += size
    plans = []
    for split, shards in groups.items():
        for index, positions in enumerate(shards):
            plans.append(ShardPlan(
                split, index, len(shards),
                tuple(listing.files[p] for p in positions),
                tuple(listing.labels[p] for p in positions),
                tuple(positions),
            ))
    return plans


def _shard_channels(plan: ShardPlan, root: str, label_names: Sequence[str],
                    limits: SizeLimits) -> int:
    """`channels: auto` for one shard's files, from their headers (nothing decoded)."""
    source = FolderSource(plan.listing(root, label_names), limits)
    return resolve_channels("auto", source.native_channels())


def _widest(counts: Iterator[int]) -> int:
    # 1 only when every shard is gray, as `resolve_channels` is over all files.
    return max(counts, default=1)


class WriteShard(beam.DoFn):
    """Header check, decode and write of one shard; quarantined files go to a tagged output."""

    def __init__(self, root: str, label_names: Sequence[str], policy: ImagePolicy,
                 assign_split: SplitAssigner, examples_dir: str, limits: SizeLimits):
        self._root = root
        self._label_names = list(label_names)
        self._policy = policy
        self._assign_split = assign_split
        self._examples_dir = examples_dir
        self._limits = limits

    def process(self, plan: ShardPlan, channels: int) -> Iterator[object]:
        source = FolderSource(plan.listing(self._root, self._label_names), self._limits)
        policy = replace(self._policy, channels=channels)
        final = os.path.join(split_dir(self._examples_dir, plan.split),
                             shard_name(plan.index, plan.count))
        partial = final + PARTIAL_SUFFIX
        written = reencoded = 0
        with tf.io.TFRecordWriter(partial, options=COMPRESSION) as writer:
            for index, split, result, was_reencoded in source_examples(
                    source, policy, self._assign_split):
                if split is None:
                    yield beam.pvalue.TaggedOutput(_QUARANTINED, (plan.positions[index], result))
                    continue
                if split != plan.split:
                    raise AssertionError(f"{plan.files[index]} hashed to {split}, planned "
                                         f"for {plan.split}")
                writer.write(result)
                written += 1
                reencoded += int(was_reencoded)
        tf.io.gfile.rename(partial, final, overwrite=True)
        yield {"split": plan.split, "written": written, "reencoded": reencoded,
               "channels": channels, "worker": os.getpid()}


def _write_summary(rows: list[object], path: str) -> None:
    from components.ingest.writer import write_json

    shards = [row for row in rows if isinstance(row, dict)]
    bad = [list(row) for row in rows if not isinstance(row, dict)]
    write_json(path, {"shards": shards, "quarantined": bad})


def _read_summary(path: str) -> dict:
    import json

    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def ingest_on_beam(
    listing: ImageListing,
    channels: str,
    policy: ImagePolicy,
    assign_split: SplitAssigner,
    examples_dir: str,
    report_path: str,
    shard_mb: float,
    limits: SizeLimits | None,
    beam_pipeline: beam.Pipeline | None = None,
) -> tuple[dict[str, int], list[dict[str, str]], dict[str, object]]:
    """Write `listing`'s Examples with Beam; returns what `ingest._write_examples` does (split
    counts, quarantined files in listing order, shard counts and re-encoded images) plus
    the resolved `channels` and the number of worker processes that wrote shards.

    `beam_pipeline` None runs on `LOCAL_INGEST_BEAM_ARGS`.
    """
    limits = limits or SizeLimits()
    plans = plan_shards(listing, assign_split, shard_mb)
    for name in assign_split.names:
        tf.io.gfile.makedirs(split_dir(examples_dir, name))
    summary_dir = os.path.join(os.path.dirname(report_path), SUMMARY_DIR)
    summary_path = os.path.join(summary_dir, "summary.json")
    if tf.io.gfile.exists(summary_dir):
        tf.io.gfile.rmtree(summary_dir)  # a retried execution's leftover
    pipeline = beam_pipeline if beam_pipeline is not None else \
        beam.Pipeline(argv=LOCAL_INGEST_BEAM_ARGS)
    root, names = listing.root, listing.label_names
    with pipeline as p:
        shards = p | "Plan shards" >> beam.Create(plans)
        if channels == "auto":
            count = (shards
                     | "Header channels" >> beam.Map(_shard_channels, root, names, limits)
                     | "Channels" >> beam.CombineGlobally(_widest))
        else:
            count = p | "Channels" >> beam.Create([int(channels)])
        written = shards | "Write shards" >> beam.ParDo(
            WriteShard(root, names, policy, assign_split, examples_dir, limits),
            beam.pvalue.AsSingleton(count),
        ).with_outputs(_QUARANTINED, main="shards")
        _ = ((written.shards, written[_QUARANTINED])
             | "Results" >> beam.Flatten()
             | "Collect" >> beam.combiners.ToList()
             | "Summary" >> beam.Map(_write_summary, summary_path))
    summary = _read_summary(summary_path)
    tf.io.gfile.rmtree(summary_dir)

    counts = dict.fromkeys(assign_split.names, 0)
    reencoded = 0
    for row in summary["shards"]:
        counts[row["split"]] += row["written"]
        reencoded += row["reencoded"]
    bad = [entry for _, entry in sorted(summary["quarantined"], key=lambda row: row[0])]
    shard_counts = {name: sum(plan.split == name for plan in plans) for name in counts}
    workers = len({row["worker"] for row in summary["shards"]})
    resolved = summary["shards"][0]["channels"]
    logger.info("Ingest on Beam: %d shards written by %d worker processes",
                len(plans), workers)
    return counts, bad, {"shards": shard_counts, "reencoded": reencoded,
                         "channels": resolved, "workers": workers}
