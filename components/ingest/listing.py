"""Find the input files: a folder of class sub-folders, or a folder of TFRecord files."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from components.ingest.errors import DataError

logger = logging.getLogger(__name__)

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecord.gz", ".tfrecords", ".gz")
# What Keras' image_dataset_from_directory takes (and what tf.io.decode_image reads); other
# files are listed as ignored in the quarantine report instead of counting as bad.
IMAGE_SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png")


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


def is_image_file(name: str) -> bool:
    """True for the image extensions Keras' `image_dataset_from_directory` takes."""
    return name.lower().endswith(IMAGE_SUFFIXES)


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


def _walk_files(class_dir: Path, root: Path) -> list[str]:
    """Relative paths of every non-hidden file below `class_dir`, hidden folders pruned,
    in os.walk's top-down order with sorted names; names and links are checked first, so
    nothing below can fail on them. Links to folders are checked, not followed.

    os.scandir's entries carry their type, so a folder of files costs no stat per file.
    """
    found: list[str] = []

    def walk(folder: str, prefix: str) -> None:
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
        found.extend(prefix + entry.name for entry in files)
        for entry in folders:
            if not entry.is_symlink():
                walk(entry.path, prefix + entry.name + "/")

    walk(str(class_dir), class_dir.relative_to(root).as_posix() + "/")
    return found


def _files_under(class_dir: Path, root: Path) -> tuple[list[str], list[str]]:
    """(image files, ignored non-image files) below `class_dir`, as relative paths."""
    every = _walk_files(class_dir, root)
    images = [name for name in every if is_image_file(name)]
    return images, [name for name in every if not is_image_file(name)]


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


def is_tfrecord_dir(root: str | os.PathLike) -> bool:
    """True when `root` holds TFRecord files (`*.tfrecord[.gz]`, `*.tfrecords`, `*.gz`).

    Only the top level counts, and a folder with class sub-folders is an image folder even
    if a stray `.gz` file sits next to them.
    """
    path = Path(root)
    if not path.is_dir():
        return False
    entries = _visible_entries(path)
    if any(entry.is_dir() for entry in entries):
        return False
    return any(entry.name.endswith(TFRECORD_SUFFIXES) for entry in entries)


def list_tfrecord_files(root: str | os.PathLike) -> list[str]:
    """Absolute paths of the TFRecord files directly in `root`, sorted by name."""
    path = _check_directory(root)
    entries = _visible_entries(path)
    files = [str(entry) for entry in entries if entry.name.endswith(TFRECORD_SUFFIXES)]
    ignored = [entry.name for entry in entries if not entry.name.endswith(TFRECORD_SUFFIXES)]
    if ignored:
        logger.warning("Ignoring %d non-TFRecord files in %s: %s", len(ignored), path, ignored[:5])
    if not files:
        raise DataError(f"no TFRecord files ({', '.join(TFRECORD_SUFFIXES)}) in {path}")
    return files


def scan_image_folder(root: str | os.PathLike) -> ImageListing:
    """List the images under `root`, one sub-folder per class (searched recursively).

    Image files (`IMAGE_SUFFIXES`, any case) are listed; files that do not decode are
    quarantined later with a reason. Other files are returned in `ignored`, as Keras'
    `image_dataset_from_directory` skips them. Files directly in `root` belong to no class
    and are ignored with a warning.

    Raises:
        DataError: `root` is missing, not a directory, unreadable, empty, has fewer than 2
            class folders, a class folder without images, a name that is not UTF-8 or has a
            control character, or a symbolic link that dangles or leaves `root`.
    """
    path = _check_directory(root)
    entries = _visible_entries(path)
    for entry in entries:
        _check_name(entry)
        _check_link(entry, path)
    class_dirs = [entry for entry in entries if entry.is_dir()]
    loose_files = [entry.name for entry in entries if not entry.is_dir()]
    if not class_dirs:
        if loose_files:
            raise DataError(
                f"data root {path} has {len(loose_files)} files but no class sub-folders; "
                "expected one sub-folder per class (or TFRecord files)"
            )
        raise DataError(f"data root {path} is empty; expected one sub-folder per class")
    if len(class_dirs) < 2:
        raise DataError(
            f"found only one class '{class_dirs[0].name}' in {path}; "
            "a classifier needs at least 2 class folders"
        )
    if loose_files:
        logger.warning(
            "Ignoring %d files directly in %s (not in a class folder): %s",
            len(loose_files),
            path,
            loose_files[:5],
        )

    files: list[str] = []
    labels: list[int] = []
    ignored: list[str] = []
    for label, class_dir in enumerate(class_dirs):
        class_files, class_ignored = _files_under(class_dir, path)
        ignored.extend(class_ignored)
        if not class_files:
            # Dropping the class would shift every later label index, so refuse instead.
            raise DataError(f"class folder {class_dir} has no image files "
                            f"({', '.join(IMAGE_SUFFIXES)}); remove it or add images")
        files.extend(class_files)
        labels.extend([label] * len(class_files))
    if ignored:
        logger.warning("Ignoring %d non-image files under %s: %s", len(ignored), path,
                       ignored[:5])
    return ImageListing(root=str(path), files=files, labels=labels,
                        label_names=[d.name for d in class_dirs], ignored=ignored)


def scan_span_folders(root: str | os.PathLike, span_dirs: Sequence[str]) -> ImageListing:
    """List the images of several span folders under `root` as one data set.

    Each span folder has one sub-folder per class; the classes are the union over the spans
    (sorted), and file paths stay relative to `root` (`span-3/7/img.png`), so the split of
    an image never changes when the window of spans moves.
    """
    if not span_dirs:
        return scan_image_folder(root)
    path = _check_directory(root)
    per_span = [scan_image_folder(path / span_dir) for span_dir in span_dirs]
    label_names = sorted({name for listing in per_span for name in listing.label_names})
    files: list[str] = []
    labels: list[int] = []
    ignored: list[str] = []
    for span_dir, listing in zip(span_dirs, per_span, strict=True):
        files.extend(f"{span_dir}/{relative}" for relative in listing.files)
        labels.extend(label_names.index(listing.label_names[label]) for label in listing.labels)
        ignored.extend(f"{span_dir}/{relative}" for relative in listing.ignored)
    return ImageListing(root=str(path), files=files, labels=labels, label_names=label_names,
                        ignored=ignored)


def compute_input_fingerprint(root: str | os.PathLike) -> str:
    """A sha256 hex digest over every non-hidden file's relative path, size and mtime_ns.

    Cheap (no file is read), so the pipeline builder can call it on every run and pass the
    result to `ImageExampleGen(input_fingerprint=...)`: TFX's cache then re-ingests exactly
    when a file is added, removed, replaced or touched.

    Raises:
        DataError: naming the path, for the names and links `scan_image_folder` refuses
            and for a file that cannot be stat'ed.
    """
    path = _check_directory(root)
    digest = hashlib.sha256()
    for relative in _walk_files(path, path):
        try:
            stat = (path / relative).stat()
        except OSError as error:
            raise DataError(f"cannot read {_printable(path / relative)}: "
                            f"{error.strerror or error}") from None
        digest.update(f"{relative}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()
