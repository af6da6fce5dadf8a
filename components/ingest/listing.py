"""The one listing of a run's data: every file the Ingest reads or reports, found once.

    listing = list_data("/data/photos")                # DataError (one line) naming the path
    listing.kind                                       # "images", "tfrecords" or "volumes"
    listing.files[0]          # ListedFile(path="cat/img_001.jpg", size=..., mtime_ns=..., label=0)
    listing.label_names, listing.fingerprint

The kind of a folder is decided here and nowhere else, from what the one walk found:
TFRecord files and no sub-folder make a TFRecord folder; class folders holding volume files
(`.nii[.gz]`, `.npy`, `.npz`) a volume folder; anything else an image folder, checked as
Keras' `image_dataset_from_directory` would read it. `pipelines/data_source.py` lists a
run's data with it once; the Ingest reads that listing (`selection.py`) and never lists the
folder again; the input fingerprint is a digest of the same listing.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal, NamedTuple

from components.ingest.errors import DataError

logger = logging.getLogger(__name__)

SourceKind = Literal["images", "tfrecords", "volumes"]
TFRECORD_SUFFIXES = (".tfrecord", ".tfrecord.gz", ".tfrecords", ".gz")
# What Keras' image_dataset_from_directory takes (and what tf.io.decode_image reads); other
# files are listed as ignored in the quarantine report instead of counting as bad.
IMAGE_SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png")
VOLUME_SUFFIXES = (".nii.gz", ".nii", ".npz", ".npy")


class ListedFile(NamedTuple):
    """One listed file: its path relative to the data root (POSIX separators), its size and
    modification time (what the fingerprint hashes), and its class index in the listing's
    `label_names` (-1: no class, e.g. an ignored non-image file or a TFRecord file)."""

    path: str
    size: int
    mtime_ns: int
    label: int = -1


@dataclass(frozen=True)
class ImageListing:
    """The images under a data root, in sorted order.

    `files` are paths relative to the root (POSIX separators, e.g. `"7/img_0003.png"`),
    `labels[i]` is the class index of `files[i]`, and `label_names[label]` is the class folder
    name. Class indices follow the sorted folder names, so they never depend on disk order.
    """

    root: str
    files: list[str]
    labels: list[int]
    label_names: list[str]
    # Non-image files in the class folders (relative paths): skipped, not counted as bad.
    ignored: list[str] = field(default_factory=list)
    # Each file's size in bytes, as listed (empty: not known; the Beam engine's shard plan).
    sizes: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Listing:
    """What `list_data` found: the folder's kind, its files in walk order, its classes.

    Empty (no files) only for a selection nobody listed (a `mptfx k8s compile` stand-in).
    """

    kind: SourceKind = "images"
    files: tuple[ListedFile, ...] = ()
    label_names: tuple[str, ...] = ()

    @cached_property
    def fingerprint(self) -> str:
        """A sha256 hex digest over every listed file's relative path, size and mtime_ns.

        Cheap (no file is read) and part of the Ingest's parameters through the listing, so
        TFX's cache re-ingests exactly when a file is added, removed, replaced or touched.
        """
        digest = hashlib.sha256()
        for listed in self.files:
            digest.update(f"{listed.path}\0{listed.size}\0{listed.mtime_ns}\n".encode())
        return digest.hexdigest()

    def image_listing(self, root: str) -> ImageListing:
        """The images (class members) and the ignored files of an image listing."""
        images = [listed for listed in self.files if listed.label >= 0]
        return ImageListing(
            root=root,
            files=[listed.path for listed in images],
            labels=[listed.label for listed in images],
            label_names=list(self.label_names),
            ignored=[listed.path for listed in self.files if listed.label < 0],
            sizes=[listed.size for listed in images],
        )


def is_image_file(name: str) -> bool:
    """True for the image extensions Keras' `image_dataset_from_directory` takes."""
    return name.lower().endswith(IMAGE_SUFFIXES)


def split_volume_name(name: str) -> tuple[str, str] | None:
    """`case001.nii.gz` -> ("case001", ".nii.gz"); None for a file that is not a volume."""
    for suffix in VOLUME_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], suffix
    return None


def _printable(path: str | os.PathLike) -> str:
    """The path as a person can read it: undecodable bytes shown as `\\xNN`."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _check_name(path: Path) -> None:
    """Refuse names TF, JSON and labels.txt cannot carry: non-UTF-8 bytes, line breaks."""
    try:
        path.name.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f"file name is not valid UTF-8: {_printable(path)}; rename it") from None
    if any(not char.isprintable() for char in path.name):
        raise DataError(f"file name has a control character (e.g. a line break): "
                        f"{path.name!r} in {_printable(path.parent)}; rename it")


def _check_link(path: Path, root: Path) -> None:
    """A symbolic link must resolve to something that exists inside the data root."""
    if not path.is_symlink():
        return
    target = Path(os.path.realpath(path))
    if not target.exists():
        raise DataError(f"dangling symbolic link {_printable(path)} -> "
                        f"{_printable(os.readlink(path))}; remove or fix it")
    real_root = Path(os.path.realpath(root))
    if target != real_root and real_root not in target.parents:
        raise DataError(f"symbolic link {_printable(path)} points outside the data root "
                        f"{_printable(root)} (to {_printable(target)}); copy the file in instead")


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _visible_entries(directory: Path) -> list[Path]:
    try:
        return sorted(entry for entry in directory.iterdir() if not _is_hidden(entry.name))
    except OSError as error:
        raise DataError(f"cannot read folder {_printable(directory)}: "
                        f"{error.strerror or error}") from None


def _walk_error(error: OSError) -> DataError:
    # An unreadable folder is an error, never skipped: a skipped folder would silently
    # drop its images from the data set.
    return DataError(f"cannot read folder {_printable(error.filename)}: "
                     f"{error.strerror or error}")


def _check_entry(path: str, name: str, is_link: bool, root: Path) -> None:
    """`_check_name` and `_check_link` of the entry `name` at `path`, without building a
    Path unless the name is suspect or the entry is a link (20,000 photos: 1.07 s with
    Paths and a stat each, 0.1 s so)."""
    try:
        plain = name.isprintable() and bool(name.encode("utf-8"))
    except UnicodeEncodeError:
        plain = False
    if not plain:
        _check_name(Path(path))
    if is_link:
        _check_link(Path(path), root)


def _listed(entry: os.DirEntry[str] | Path, relative: str) -> ListedFile:
    """`entry` with its size and mtime (a link's target's, as a reader sees it)."""
    try:
        stat = entry.stat()
    except OSError as error:
        raise DataError(f"cannot read {_printable(str(entry))}: "
                        f"{error.strerror or error}") from None
    return ListedFile(relative, stat.st_size, stat.st_mtime_ns)


def _walk_files(class_dir: Path, root: Path, prefix: str) -> list[ListedFile]:
    """Every non-hidden file below `class_dir` (paths `prefix` + relative to `root`), hidden
    folders pruned, in os.walk's top-down order with sorted names; names and links are
    checked first, so nothing below can fail on them. Links to folders are checked, not
    followed.

    os.scandir's entries carry their type, so telling files from folders costs no stat;
    each file's one stat gives the size and mtime the fingerprint and the shard plan use.
    """
    found: list[ListedFile] = []

    def walk(folder: str, relative: str) -> None:
        try:
            with os.scandir(folder) as listing:
                entries = sorted((entry for entry in listing if not _is_hidden(entry.name)),
                                 key=lambda entry: entry.name)
            folders: list[os.DirEntry[str]] = []
            files: list[os.DirEntry[str]] = []
            for entry in entries:
                (folders if entry.is_dir() else files).append(entry)
        except OSError as error:
            raise _walk_error(error) from None
        for entry in folders + files:
            _check_entry(entry.path, entry.name, entry.is_symlink(), root)
        found.extend(_listed(entry, relative + entry.name) for entry in files)
        for entry in folders:
            if not entry.is_symlink():
                walk(entry.path, relative + entry.name + "/")

    walk(str(class_dir), prefix + class_dir.relative_to(root).as_posix() + "/")
    return found


def _check_directory(root: str | os.PathLike) -> Path:
    path = Path(root)
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except (OSError, UnicodeError) as error:
        raise DataError(f"cannot read data root {_printable(path)}: {error}") from None
    if not exists:
        raise DataError(f"data root {_printable(path)} does not exist")
    if not is_dir:
        raise DataError(f"data root {_printable(path)} is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise DataError(f"cannot read data root {_printable(path)}: permission denied")
    return path


def read_folder(root: str | os.PathLike) -> list[Path]:
    """The visible entries of the data root, sorted: its one read, which the span discovery
    (`spans.py`) and `list_folder` share.

    Raises:
        DataError: `root` is missing, not a directory or unreadable.
    """
    return _visible_entries(_check_directory(root))


def list_data(root: str | os.PathLike, span_dirs: Sequence[str] = ()) -> Listing:
    """`list_spans` of `root`'s `span_dirs`, or `list_folder` of `root` itself."""
    if span_dirs:
        return list_spans(root, span_dirs)
    return list_folder(root, read_folder(root))


def list_spans(root: str | os.PathLike, span_dirs: Sequence[str]) -> Listing:
    """The span folders `span_dirs` of `root`, listed once each, as one image data set.

    Span folders are image folders; their classes are the union over the spans (sorted),
    and paths stay relative to `root` (`span-3/7/img.png`), so the split of an image never
    changes when the window of spans moves.

    Raises:
        DataError: as `list_folder` for an image folder.
    """
    path = _check_directory(root)
    per_span = []
    for span_dir in span_dirs:
        folder = _check_directory(path / span_dir)
        per_span.append(_list_folder(folder, _visible_entries(folder), f"{span_dir}/",
                                     images_only=True))
    label_names = sorted({name for listing in per_span for name in listing.label_names})
    files = [listed._replace(label=label_names.index(listing.label_names[listed.label]))
             if listed.label >= 0 else listed
             for listing in per_span for listed in listing.files]
    return Listing("images", tuple(files), tuple(label_names))


def list_folder(root: str | os.PathLike, entries: list[Path]) -> Listing:
    """List the folder `root` whose entries `read_folder` read, below them every file once.

    Raises:
        DataError: an image folder that is empty, has fewer than 2 class folders or a class
            folder without images; a name that is not UTF-8 or has a control character; a
            symbolic link that dangles or leaves `root`; an unreadable folder; a file that
            cannot be stat'ed.
    """
    return _list_folder(Path(root), entries, "", images_only=False)


def _list_folder(folder: Path, entries: list[Path], prefix: str, images_only: bool) -> Listing:
    """One folder's listing (`prefix` before every path), of the kind its files make."""
    for entry in entries:
        _check_name(entry)
        _check_link(entry, folder)
    class_dirs = [entry for entry in entries if entry.is_dir()]
    loose_files = [entry for entry in entries if not entry.is_dir()]
    if not class_dirs and not images_only:
        records = [entry for entry in loose_files if entry.name.endswith(TFRECORD_SUFFIXES)]
        if records:
            return _tfrecord_listing(folder, prefix, records, loose_files)
    if not class_dirs:
        if loose_files:
            raise DataError(
                f"data root {folder} has {len(loose_files)} files but no class sub-folders; "
                "expected one sub-folder per class (or TFRecord files)"
            )
        raise DataError(f"data root {folder} is empty; expected one sub-folder per class")
    walked = [(class_dir.name, _walk_files(class_dir, folder, prefix))
              for class_dir in class_dirs]
    if not images_only and any(_holds_volumes(files) for _, files in walked):
        return _volume_listing(walked)
    return _image_listing(folder, walked, [entry.name for entry in loose_files])


def _tfrecord_listing(folder: Path, prefix: str, records: list[Path],
                      loose_files: list[Path]) -> Listing:
    ignored = [entry.name for entry in loose_files if entry not in records]
    if ignored:
        logger.warning("Ignoring %d non-TFRecord files in %s: %s", len(ignored), folder,
                       ignored[:5])
    return Listing("tfrecords", tuple(_listed(entry, prefix + entry.name) for entry in records))


def _direct(files: list[ListedFile]) -> list[ListedFile]:
    """The files directly in a class folder (a volume folder has no spans: `class/name`)."""
    return [listed for listed in files if listed.path.count("/") == 1]


def _holds_volumes(files: list[ListedFile]) -> bool:
    # The suffix first: a photo folder's 20,000 names are each tested once, cheaply.
    return any(listed.path.endswith(VOLUME_SUFFIXES) and listed.path.count("/") == 1
               for listed in files)


def _volume_listing(walked: list[tuple[str, list[ListedFile]]]) -> Listing:
    """Class folders holding volumes; each one's own files (volume_source.py pairs them)."""
    classes = [(name, _direct(files)) for name, files in walked if _holds_volumes(files)]
    listed = [file._replace(label=label) for label, (_, files) in enumerate(classes)
              for file in files]
    return Listing("volumes", tuple(listed), tuple(name for name, _ in classes))


def _image_listing(folder: Path, walked: list[tuple[str, list[ListedFile]]],
                   loose_files: list[str]) -> Listing:
    """Image files labelled by their class folder (any case of `IMAGE_SUFFIXES`; files that
    do not decode are quarantined later with a reason); other files are kept with label -1
    (ignored, as Keras' `image_dataset_from_directory` skips them). Files directly in the
    folder belong to no class and are ignored with a warning."""
    if len(walked) < 2:
        raise DataError(
            f"found only one class '{walked[0][0]}' in {folder}; "
            "a classifier needs at least 2 class folders"
        )
    if loose_files:
        logger.warning("Ignoring %d files directly in %s (not in a class folder): %s",
                       len(loose_files), folder, loose_files[:5])
    listed: list[ListedFile] = []
    for label, (name, files) in enumerate(walked):
        if not any(is_image_file(file.path) for file in files):
            # Dropping the class would shift every later label index, so refuse instead.
            raise DataError(f"class folder {folder / name} has no image files "
                            f"({', '.join(IMAGE_SUFFIXES)}); remove it or add images")
        listed.extend(file._replace(label=label) if is_image_file(file.path) else file
                      for file in files)
    ignored = [file.path for file in listed if file.label < 0]
    if ignored:
        logger.warning("Ignoring %d non-image files under %s: %s", len(ignored), folder,
                       ignored[:5])
    return Listing("images", tuple(listed), tuple(name for name, _ in walked))
