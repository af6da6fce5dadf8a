"""The kinds of files real photo folders hold, made with Pillow: shared by the header-pass
tests and the tests that follow each kind's pixels from the Ingest to every reader."""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
from PIL import Image


def image(mode: str, size: tuple[int, int] = (37, 23)) -> Image.Image:
    """Random pixels of `size` (width, height) in Pillow `mode`."""
    rng = np.random.default_rng(0)
    if mode == "I;16":
        return Image.fromarray(rng.integers(0, 65535, size[::-1], dtype=np.uint16))
    pixels = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels).convert(mode)


def encoded(picture: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, fmt, **options)
    return buffer.getvalue()


def camera_exif() -> bytes:
    """An orientation tag (6: rotate 90° to view) and 30 kB of maker notes before the frame
    header, as cameras write them."""
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x927C] = b"m" * 30_000
    return exif.tobytes()


KINDS: dict[str, Callable[[], bytes]] = {
    "jpeg rgb": lambda: encoded(image("RGB"), "JPEG"),
    "jpeg progressive": lambda: encoded(image("RGB"), "JPEG", progressive=True),
    "jpeg gray": lambda: encoded(image("L"), "JPEG"),
    "jpeg cmyk": lambda: encoded(image("CMYK"), "JPEG"),
    "jpeg exif": lambda: encoded(image("RGB"), "JPEG", exif=camera_exif()),
    "jpeg icc": lambda: encoded(image("RGB"), "JPEG", icc_profile=b"p" * 70_000),
    "png 1-bit": lambda: encoded(image("1"), "PNG"),
    "png gray": lambda: encoded(image("L"), "PNG"),
    "png gray+alpha": lambda: encoded(image("LA"), "PNG"),
    "png rgb": lambda: encoded(image("RGB"), "PNG"),
    "png rgba": lambda: encoded(image("RGBA"), "PNG"),
    "png palette": lambda: encoded(image("P"), "PNG"),
    "png palette+transparency": lambda: encoded(image("P"), "PNG", transparency=0),
    "png 16-bit": lambda: encoded(image("I;16"), "PNG"),
    "gif": lambda: encoded(image("P"), "GIF"),
    "bmp": lambda: encoded(image("RGB"), "BMP"),
}
