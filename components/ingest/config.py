"""`data`: the Ingest's keys (components/ingest/), and the data sources built in.

pipelines/config.py composes `IngestDataSection` with the Trainer's part of `data`
(`channels`, components/trainer/config.py) into the one `data` section. Importing this
module is cheap (pydantic only).

    data = IngestDataSection(source="/data/flowers", image_size=[224, 224])
    data.spans.window   # 1: train on the last span folder
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from components.core.sections import StrictSection

BUILTIN_DIGITS = "builtin:digits"
# Small 3D volumes (a cube or a sphere in noise) with voxel masks, for segmentation models.
SYNTHETIC_VOLUMES = "synthetic:volumes"
# Every stored image is this size when data.image_size is set: 8192x8192x3 uint8 is 200 MB
# per image before the batch multiplies it.
MAX_IMAGE_SIDE = 8192


class SpansSection(StrictSection):
    # Train on the last `window` span folders (span-<N> or a {SPAN} pattern in data.source).
    window: int = Field(1, ge=1)

class IngestDataSection(StrictSection):
    """The part of `data` the Ingest reads; pipelines/config.py adds the Trainer's (`channels`)."""

    # A folder with one sub-folder per class, a folder of TFRecord files, builtin:digits,
    # synthetic:volumes, or a folder of span-<N> drops (or a pattern such as /data/drop-{SPAN}).
    source: str = BUILTIN_DIGITS
    spans: SpansSection = Field(default_factory=SpansSection)
    # "" = infer with SchemaGen each run; a schema.pbtxt path = validate against it
    # (mptfx retrain freezes the first trained span's schema in <workspace>/schema/).
    schema_file: str = ""
    # builtin:digits: export at most this many images per class (0 = all 1,797);
    # synthetic:volumes: this many volumes per class (0 = 100 cubes and 100 spheres).
    builtin_per_class: int = Field(0, ge=0)
    splits: dict[str, float] = Field(default_factory=lambda: {"train": 0.8, "eval": 0.2})
    # null keeps each image's own size (the Trainer resizes); [H, W] resizes at ingest.
    image_size: list[int] | None = None
    resize_method: Literal["stretch", "pad"] = "stretch"
    max_bad_fraction: float = Field(0.01, ge=0.0, le=1.0)
    # Header-first limits: a larger image is quarantined with the reason, never decoded.
    # The default is Pillow's decompression-bomb threshold.
    max_pixels: int = Field(89_478_485, ge=1)
    max_file_mb: float = Field(100.0, gt=0)
    # Each file's own bytes are stored; only an image whose pixels change (image_size, alpha,
    # RGB stored as gray) is re-encoded: JPEG at this quality for JPEG files, PNG otherwise.
    jpeg_quality: int = Field(95, ge=1, le=100)
    # Each split is written as GZIP TFRecord shards of about this many MB (TFX's ExampleGen
    # shards too): parallel reads, and a multi-worker Trainer gives each worker its own files.
    shard_mb: float = Field(128.0, gt=0)
    # local: the Ingest in its own process (tf.data decodes on every core of it); beam: a Beam
    # pipeline on pipeline.beam_pipeline_args (in process: one DirectRunner worker per core),
    # so a cluster runner spreads the decode over machines. Same Examples either way.
    ingest_engine: Literal["local", "beam"] = "local"

    @field_validator("source")
    @classmethod
    def _not_empty(cls, source: str) -> str:
        if not source.strip():
            raise ValueError("data.source must name a folder, builtin:digits or "
                             "synthetic:volumes (an empty value would ingest the current folder)")
        return source

    @field_validator("splits")
    @classmethod
    def _train_and_eval(cls, splits: dict[str, float]) -> dict[str, float]:
        if set(splits) != {"train", "eval"}:
            raise ValueError(f"splits must name exactly 'train' and 'eval'. Received: {splits}")
        if any(ratio <= 0 for ratio in splits.values()) or abs(sum(splits.values()) - 1) > 1e-6:
            raise ValueError(f"split ratios must be > 0 and sum to 1. Received: {splits}")
        return splits

    @field_validator("image_size")
    @classmethod
    def _two_positive_ints(cls, size: list[int] | None) -> list[int] | None:
        if size is not None and (len(size) != 2 or min(size) < 1):
            raise ValueError(f"image_size must be [height, width] or null. Received: {size}")
        if size is not None and max(size) > MAX_IMAGE_SIDE:
            raise ValueError(f"image_size sides must be at most {MAX_IMAGE_SIDE}. "
                             f"Received: {size}")
        return size
