"""Volumes from the user: a folder of volume/mask pairs for segmentation models.

Layout (one sub-folder per kind of object, like image folders; the kind is the `label`
the Evaluator slices Dice by):

    volumes/
      liver/
        case001.nii.gz        a volume: 3D [D, H, W] (or [D, H, W, 1]), any numeric dtype
        case001_mask.nii.gz   its mask, same shape: 0 = background, anything else = object
        case002.npy           NumPy arrays work the same way ...
        case002_mask.npy
        case003.npz           ... or one .npz holding both, as arrays `volume` and `mask`

NIfTI (`.nii`, `.nii.gz`) is read with nibabel in the file's voxel order (no reorientation).
Each volume is scaled to 0-255 by its own min/max and written as the synthetic volumes
are (synthetic_volumes.py): a PNG of the D slices stacked vertically, `depth`, and the
D*H*W mask voxels. A pair that cannot be used -- a missing mask, an unreadable file,
shapes that differ, not 3D, too many voxels, a side under 8 -- is quarantined with its
reason, like a corrupt image; splits are by the volume's relative path hash.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tensorflow as tf

from components.core.text import one_line
from components.examples_format import DEPTH_KEY, LABEL_KEY, MASK_KEY
from components.ingest.errors import DataError
from components.ingest.headers import SizeLimits, size_problem
from components.ingest.listing import ListedFile, Listing, split_volume_name
from components.ingest.sources import SourceItem

MASK_SUFFIX = "_mask"
# 256^3 voxels (64 MB as uint8): far above what a CPU trains on, small enough to decode.
MAX_VOXELS = 256**3
MAX_FILE_BYTES = 1 << 30
MIN_SIDE = 8


def _read_array(path: Path, size: int, suffix: str, key: str = "volume") -> np.ndarray:
    if size > MAX_FILE_BYTES:
        raise ValueError(f"file is larger than {MAX_FILE_BYTES >> 20} MB")
    if suffix in (".nii", ".nii.gz"):
        import nibabel

        return np.asarray(nibabel.load(str(path)).dataobj)
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as arrays:
            if key not in arrays:
                raise ValueError(f"has no array {key!r} (found {sorted(arrays.files)})")
            return arrays[key]
    return np.load(path, allow_pickle=False)


def _check_pair(volume: np.ndarray, mask: np.ndarray) -> str | None:
    """Why a volume/mask pair cannot be used, or None."""
    if volume.ndim == 4 and volume.shape[-1] == 1:
        volume = volume[..., 0]
    if mask.ndim == 4 and mask.shape[-1] == 1:
        mask = mask[..., 0]
    if volume.ndim != 3:
        return f"volume must be 3D [D, H, W]. Received: shape={volume.shape}"
    if mask.shape != volume.shape:
        return f"mask shape {mask.shape} differs from volume shape {volume.shape}"
    if volume.size > MAX_VOXELS:
        return f"{volume.size} voxels > {MAX_VOXELS} allowed. Received: shape={volume.shape}"
    if min(volume.shape) < MIN_SIDE:
        return f"every side must be >= {MIN_SIDE} voxels. Received: shape={volume.shape}"
    if not np.issubdtype(volume.dtype, np.number) or not np.isfinite(volume).all():
        return f"volume must be finite numbers. Received: dtype={volume.dtype}"
    return None


def _to_uint8(volume: np.ndarray) -> np.ndarray:
    """Scales one volume's intensities to 0-255 by its own min and max."""
    volume = volume.astype(np.float64)
    low, high = float(volume.min()), float(volume.max())
    if high <= low:
        return np.zeros(volume.shape, np.uint8)
    return np.round((volume - low) / (high - low) * 255.0).astype(np.uint8)


def _png(slices: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(slices, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


class VolumeSource:
    """Volume/mask pairs under class folders, offered to the ingest like images.

    Every pair is read once here; the PNG of its stacked slices goes through the same
    decode pipeline as an image, the `depth` and `mask` features ride along in each item's
    example.
    """

    read_paths = False  # dataset() gives the stacked slices' PNG bytes

    def __init__(self, root: str | os.PathLike, listing: Listing,
                 limits: SizeLimits | None = None):
        self.root = Path(root)
        self.description = f"volume folder {self.root}"
        self._limits = limits or SizeLimits()
        # Files beside the volumes that are neither a volume nor its mask, as the image
        # folders list them: reported, not counted as bad.
        self.ignored: list[str] = []
        self.label_names = list(listing.label_names)
        self._items: list[SourceItem] = []
        self._pngs: list[bytes] = []
        for label, name in enumerate(self.label_names):
            files = {os.path.basename(listed.path): listed for listed in listing.files
                     if listed.label == label}
            for item, png in self._class_items(label, name, files):
                self._items.append(item)
                self._pngs.append(png)
        if not self._items:
            raise DataError(f"volume folder {self.root} holds no volumes")

    def _class_items(self, label: int, name: str,
                     files: dict[str, ListedFile]) -> Iterator[tuple[SourceItem, bytes]]:
        for file_name in sorted(files):
            parts = split_volume_name(file_name)
            if parts is None:
                self.ignored.append(f"{name}/{file_name}")
                continue
            if parts[0].endswith(MASK_SUFFIX) and parts[1] != ".npz":
                continue
            stem, suffix = parts
            relative = f"{name}/{file_name}"
            problem, example, png = self._read_pair(files, file_name, stem, suffix)
            if example is not None:
                _set_int(example, LABEL_KEY, [label])
            yield SourceItem(path=relative, split_key=relative, filename=relative,
                             label=label, label_name=name, problem=problem,
                             example=example), png

    def _read_pair(self, files: dict[str, ListedFile], file_name: str, stem: str,
                   suffix: str) -> tuple[str | None, tf.train.Example | None, bytes]:
        """(problem, example with depth and mask, PNG) for one volume file."""
        too_large = size_problem(files[file_name].size, self._limits)
        if too_large:
            return too_large, None, b""
        try:
            volume = self._read(files[file_name], suffix, "volume")
            if suffix == ".npz":
                mask = self._read(files[file_name], suffix, "mask")
            else:
                mask_name = f"{stem}{MASK_SUFFIX}{suffix}"
                if mask_name not in files:
                    return f"no mask {mask_name} beside it", None, b""
                mask = self._read(files[mask_name], suffix)
        except Exception as error:  # any reader's failure quarantines the pair, named
            return f"unreadable: {type(error).__name__}: {one_line(str(error))}", None, b""
        problem = _check_pair(volume, mask)
        if problem:
            return problem, None, b""
        volume = volume.reshape(volume.shape[:3])
        depth, height, width = volume.shape
        mask = (mask.reshape(volume.shape) != 0).astype(np.int64)
        example = tf.train.Example()
        _set_int(example, DEPTH_KEY, [depth])
        _set_int(example, MASK_KEY, mask.reshape(-1).tolist())
        return None, example, _png(_to_uint8(volume).reshape(depth * height, width))

    def _read(self, listed: ListedFile, suffix: str, key: str = "volume") -> np.ndarray:
        return _read_array(self.root / listed.path, listed.size, suffix, key)

    def __len__(self) -> int:
        return len(self._items)

    def dataset(self) -> tf.data.Dataset:
        """`(index, PNG bytes)` of the stacked slices of the pairs not quarantined."""
        kept = [index for index, png in enumerate(self._pngs) if png]
        return tf.data.Dataset.from_tensor_slices(
            (tf.constant(kept, tf.int64),
             tf.constant([self._pngs[index] for index in kept], tf.string))
        )

    def native_channels(self) -> list[int]:
        """Volumes are read as one-channel (grayscale) slices."""
        return [1 for item in self._items if item.problem is None]

    def items(self) -> Iterator[SourceItem]:
        """One item per volume file, in index order."""
        yield from self._items

    def item_data(self, index: int, item: SourceItem) -> bytes:
        """The stacked slices' PNG, for an item the batched decode did not return."""
        return self._pngs[index]


def _set_int(example: tf.train.Example, name: str, values: list[int]) -> None:
    feature = example.features.feature[name]
    feature.Clear()
    feature.int64_list.value.extend(values)
