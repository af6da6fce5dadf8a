"""One walk over a source: each element decoded, validated and built into an Example, or
quarantined; the local engine (ingest.py) and the Beam engine (beam_ingest.py) share it."""

from __future__ import annotations

from collections.abc import Iterator

from components.ingest.reader import DecodedImage, ImagePolicy, decode_images, decode_one
from components.ingest.sources import FolderSource, TFRecordSource
from components.ingest.splits import SplitAssigner
from components.ingest.volume_source import VolumeSource
from components.ingest.writer import example_record


def source_examples(
    source: FolderSource | TFRecordSource | VolumeSource,
    policy: ImagePolicy,
    assign_split: SplitAssigner,
) -> Iterator[tuple[int, str | None, bytes | dict[str, str], bool]]:
    """Every element of `source` in index order: `(index, split, serialized Example,
    re-encoded?)` when usable, `(index, None, {"path": ..., "reason": ...}, False)` when
    quarantined. Both engines walk a source with this (the Beam engine one shard's files
    at a time)."""
    # The decoded stream is the items' index order minus the failures, so walking both
    # together tells exactly which items failed.
    decoded_images = decode_images(source.dataset(), policy, read_paths=source.read_paths)
    next_image = next(decoded_images, None)
    for index, item in enumerate(source.items()):
        image: DecodedImage | str | None = None
        if next_image is not None and next_image.index == index:
            image, next_image = next_image, next(decoded_images, None)
        elif item.problem is None:
            # Missing: it, or another image of its decode batch, failed; alone it is stored
            # as the batch would have stored it, or gets its reason.
            data = source.item_data(index, item)
            image = data if isinstance(data, str) else decode_one(index, data, policy)
        reason = item.problem or (image if isinstance(image, str) else None)
        if reason or not isinstance(image, DecodedImage):
            yield index, None, {"path": item.path, "reason": reason}, False
            continue
        record = example_record(image, item.label, item.label_name, item.filename, item.example)
        yield index, assign_split(item.split_key), record, image.reencoded
