"""Header-first checks: an image's size and channels from its header, before anything decodes.

A PNG whose header says 40000x40000 pixels decodes to 4.8 GB; decoding it to find out is
an out-of-memory kill with no message. Pillow reads only the header on `Image.open`
(the pixels are decoded lazily), so each file is measured before tf.data touches it and
quarantined with the reason when it exceeds `data.max_pixels` or `data.max_file_mb`.

    limits = SizeLimits(max_pixels=50_000_000, max_file_mb=100)
    check = check_file("data/cat/1.png", limits)
    check.problem  # None, or "image is 40000x40000 = 1600000000 pixels > data.max_pixels ..."
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from PIL import Image, UnidentifiedImageError

# Pillow's own decompression-bomb threshold: 1 GiB of 24-bit pixels / 3 channels / 4.
DEFAULT_MAX_PIXELS = 89_478_485
DEFAULT_MAX_FILE_MB = 100.0
_MB = 1024 * 1024
# Files the kernel is asked to read ahead of the header check (a window, so a million
# photos do not flood the page cache).
_READ_AHEAD = 256
# Readers are woken once per this many checks (and when the pass ends).
_NOTIFY_EVERY = 64
# Modes Pillow reports for images tf.io.decode_image returns with 1 or 2 channels.
_GRAY_MODES = {"1": 1, "L": 1, "I": 1, "I;16": 1, "I;16B": 1, "I;16L": 1, "F": 1, "LA": 2,
               "La": 2}


@dataclass(frozen=True)
class SizeLimits:
    """The largest image ingest decodes: pixels from the header, and bytes on disk."""

    max_pixels: int = DEFAULT_MAX_PIXELS
    max_file_mb: float = DEFAULT_MAX_FILE_MB

    def __post_init__(self) -> None:
        if self.max_pixels < 1 or self.max_file_mb <= 0:
            raise ValueError(f"max_pixels and max_file_mb must be positive. Received: "
                             f"max_pixels={self.max_pixels!r}, max_file_mb={self.max_file_mb!r}")


@dataclass(frozen=True)
class HeaderCheck:
    """What the header says: `problem` set means quarantine without decoding; `channels`
    is the channel count tf.io.decode_image will return (None when Pillow cannot tell)."""

    problem: str | None = None
    channels: int | None = None


def _decoded_channels(image: Image.Image) -> int:
    # TF decodes every GIF as RGB and palette images as RGB(A); only true gray stays 1-2.
    if image.format == "GIF":
        return 3
    return _GRAY_MODES.get(image.mode, 4 if "A" in image.mode else 3)


def size_problem(size_bytes: int, limits: SizeLimits) -> str | None:
    """The quarantine reason of a file over `data.max_file_mb`, else None."""
    if size_bytes > limits.max_file_mb * _MB:
        return f"file is {size_bytes / _MB:.1f} MB > data.max_file_mb {limits.max_file_mb:g}"
    return None


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# What Pillow's PNG plugin reports per IHDR colour type, as decoded channels: gray (modes 1,
# L, I;16), RGB, palette (P: TF decodes it as RGB or RGBA), gray + alpha (LA), RGBA.
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
# JPEG markers that start a frame (SOF0-SOF15), minus DHT, JPG and DAC, which share the range.
_JPEG_FRAMES = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_SCAN, _JPEG_STANDALONE = 0xDA, {0x01, *range(0xD0, 0xD8)}


def _png_size(handle: BinaryIO) -> tuple[int, int, int] | None:
    """(width, height, decoded channels) from a PNG's IHDR chunk, or None."""
    handle.seek(0)
    head = handle.read(26)
    if len(head) < 26 or head[12:16] != b"IHDR" or head[25] not in _PNG_CHANNELS:
        return None
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    return width, height, _PNG_CHANNELS[head[25]]


def _jpeg_size(handle: BinaryIO) -> tuple[int, int, int] | None:
    """(width, height, decoded channels) from a JPEG's frame header, or None. Segments
    before it (EXIF, ICC profiles, thumbnails) are skipped by their lengths, not read."""
    handle.seek(2)
    while True:
        marker = handle.read(2)
        if len(marker) < 2 or marker[0] != 0xFF:
            return None
        if marker[1] == 0xFF:  # a fill byte
            handle.seek(-1, os.SEEK_CUR)
            continue
        if marker[1] in _JPEG_STANDALONE:
            continue
        if marker[1] == _JPEG_SCAN:
            return None  # image data before any frame header
        length = handle.read(2)
        if len(length) < 2:
            return None
        if marker[1] in _JPEG_FRAMES:
            frame = handle.read(6)
            if len(frame) < 6:
                return None
            height, width = int.from_bytes(frame[1:3], "big"), int.from_bytes(frame[3:5], "big")
            # 1 component: gray (Pillow's L); 3: YCbCr or RGB; 4: CMYK/YCCK, decoded as RGB.
            return (width, height, 1 if frame[5] == 1 else 3) if width and height else None
        skip = int.from_bytes(length, "big") - 2
        if skip < 0:
            return None  # a length that does not cover itself: corrupt
        handle.seek(skip, os.SEEK_CUR)


def _lean_size(handle: BinaryIO) -> tuple[int, int, int] | None:
    """The size and channels of a JPEG or PNG read from its header in a few reads, or None
    (another format, or a header this parser does not follow: Pillow reads those). Pillow's
    `Image.open` spent 95 us a 224-pixel JPEG photo on the AVX2 EPYC, this ~10 us; the
    result is Pillow's (tests/unit/test_ingest_headers.py compares them)."""
    start = handle.read(8)
    if start[:3] == b"\xff\xd8\xff":
        return _jpeg_size(handle)
    if start == _PNG_SIGNATURE:
        return _png_size(handle)
    return None


def _pillow_size(handle: BinaryIO) -> tuple[int, int, int] | None:
    try:
        with Image.open(handle) as image:
            return image.size[0], image.size[1], _decoded_channels(image)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return None


def _check_header(handle: BinaryIO, size_bytes: int, limits: SizeLimits) -> HeaderCheck:
    too_large = size_problem(size_bytes, limits)
    if too_large:
        return HeaderCheck(too_large)
    try:
        found = _lean_size(handle)
    except (OSError, ValueError):
        found = None
    if found is None:
        handle.seek(0)
        found = _pillow_size(handle)
    if found is None:
        # Not an image Pillow knows: the decode step quarantines it with TF's reason.
        return HeaderCheck()
    width, height, channels = found
    if width * height > limits.max_pixels:
        return HeaderCheck(f"image is {width}x{height} = {width * height} pixels > "
                           f"data.max_pixels {limits.max_pixels}")
    return HeaderCheck(None, channels)


@contextlib.contextmanager
def _pillow_limit_off() -> Iterator[None]:
    """Pillow's own bomb check would refuse before telling the size; data.max_pixels is the
    limit here, so it is switched off while headers are read (nothing is decoded)."""
    pillow_limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            yield
    finally:
        Image.MAX_IMAGE_PIXELS = pillow_limit


def check_file(path: str, limits: SizeLimits) -> HeaderCheck:
    """Size and header check of the file at `path` (reads the header only)."""
    with _pillow_limit_off():
        return _check_path(path, limits)


def _check_path(path: str, limits: SizeLimits) -> HeaderCheck:
    try:
        size_bytes = os.stat(path).st_size
        with open(path, "rb") as handle:
            return _check_header(handle, size_bytes, limits)
    except OSError as error:
        return HeaderCheck(f"unreadable file: {error.strerror or error}")


def _read_ahead(path: str, limits: SizeLimits) -> None:
    """Ask the kernel to start reading `path` now (it returns at once): the header read,
    and tf.data's read of the whole file after it, then find the pages in the cache. A file
    over `data.max_file_mb` is quarantined unread, so it is not read ahead either."""
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return  # _check_path names the error
    try:
        if size_problem(os.fstat(handle).st_size, limits) is None:
            os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(handle)


class HeaderPass:
    """`check_file` of every path, in order, on a thread of its own, with the kernel reading
    `_READ_AHEAD` files ahead; the decode starts on the files already checked.

    The checks run in Python, so the pass is serial: with Pillow 20,000 JPEG headers took
    1.9 s on an AVX2 EPYC (0.8 s on an AVX-512 Xeon), a fifth of a 2-core ingest while the
    decode waited for them; `_lean_size` reads them in about a third of that. On this
    thread the pass runs beside the decode, which runs in tf.data's own threads;
    `checks(start, stop)` blocks until those are known. It never waits on its readers, so
    it always finishes. (4 threads queued on the GIL: 2.9 s on the Xeon.)

        pass_ = HeaderPass(paths, SizeLimits())
        pass_.checks(0, 256)      # the first 256 checks, waiting for them if need be
        resolve_channels("auto", pass_.channels())  # stops at the first colour image
    """

    def __init__(self, paths: Sequence[str], limits: SizeLimits):
        self._paths, self._limits = list(paths), limits
        self._checks: list[HeaderCheck] = []
        self._error: BaseException | None = None
        self._done = False
        self._stopped = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="mptfx-header-pass",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        ahead = _read_ahead if hasattr(os, "posix_fadvise") else None
        # Pillow's own bomb check would refuse before telling the size (data.max_pixels is
        # the limit here); with its limit None it neither checks nor warns, so no warnings
        # filter is touched from this thread. Nothing else in an ingest opens images with
        # Pillow while the pass runs.
        pillow_limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            if ahead is not None:
                for early in self._paths[:_READ_AHEAD - 1]:
                    ahead(early, self._limits)
            for index, path in enumerate(self._paths):
                if self._stopped:
                    return
                if ahead is not None and index + _READ_AHEAD - 1 < len(self._paths):
                    ahead(self._paths[index + _READ_AHEAD - 1], self._limits)
                check = _check_path(path, self._limits)
                with self._changed:
                    self._checks.append(check)
                    if index % _NOTIFY_EVERY == 0:
                        self._changed.notify_all()
        except BaseException as error:  # raised again in the reader's thread
            self._error = error
        finally:
            Image.MAX_IMAGE_PIXELS = pillow_limit
            with self._changed:
                self._done = True
                self._changed.notify_all()

    def checks(self, start: int, stop: int) -> list[HeaderCheck]:
        """The checks of paths `start` to `stop` (exclusive), waiting for them if need be;
        fewer only if the pass was stopped."""
        with self._changed:
            self._changed.wait_for(lambda: len(self._checks) >= stop or self._done)
            if self._error is not None:
                raise self._error
            return self._checks[start:stop]

    def check(self, index: int) -> HeaderCheck:
        """The check of path `index`, waiting for it if need be."""
        (check,) = self.checks(index, index + 1)
        return check

    def channels(self) -> Iterator[int]:
        """The decoded channel count of every file whose header passed, as the pass finds
        them: a reader that stops at the first colour image does not wait for the rest."""
        index = 0
        while index < len(self._paths):
            known = self.checks(index, min(index + _NOTIFY_EVERY, len(self._paths)))
            if not known:
                return  # stopped
            for check in known:
                if check.problem is None and check.channels is not None:
                    yield check.channels
            index += len(known)

    def stop(self) -> None:
        """Ends the pass early (an ingest that failed does not need the rest)."""
        self._stopped = True


def check_bytes(data: bytes, limits: SizeLimits) -> HeaderCheck:
    """The same check for an encoded image already in memory (a TFRecord's `image`)."""
    with _pillow_limit_off():
        return _check_header(io.BytesIO(data), len(data), limits)
