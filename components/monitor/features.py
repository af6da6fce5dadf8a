"""The features the monitor compares: one function at training time and at serving time.

For every image: its stored size and channels, how bright it is and with what contrast, the
share of near-black and near-white pixels, and how it was encoded; for every answer: the
class the model predicted and how sure it was (top-1 probability).

    row = image_features(png_bytes)                        # from the encoded file
    row = pixel_features(uint8_array, encoding="raw")       # a predict_images request
    row.update(answer_features("7", [0.01, ..., 0.93]))

The Trainer computes them on its splits (reference.py) and `mptfx monitor` on the logged
requests, both through these functions, so a difference is the data's, not the code's.
numpy and Pillow only, imported when pixels are read: the config imports the names.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where pixels are read: the config imports the names
    import numpy as np

IMAGE_FEATURES = ("height", "width", "channels", "brightness", "contrast", "dark_fraction",
                  "bright_fraction", "encoding")
ANSWER_FEATURES = ("predicted_class", "confidence")
FEATURES = IMAGE_FEATURES + ANSWER_FEATURES
# Compared with the L-infinity distance; every other feature is numeric (Jensen-Shannon).
CATEGORICAL_FEATURES = ("encoding", "predicted_class")

# A pixel whose mean over its colour channels is within 5 % of black (white) counts as
# near-black (near-white): what under- and over-exposure, or a blank frame, look like.
NEAR_BLACK = 0.05 * 255
NEAR_WHITE = 0.95 * 255
# Pixel statistics are skipped (left missing) above Pillow's decompression-bomb threshold,
# the default of data.max_pixels: the header's size and encoding are still recorded.
MAX_PIXELS = 89_478_485

RAW_ENCODING = "raw"            # pixels sent as a uint8 tensor (predict_images)
UNDECODABLE = "undecodable"     # bytes that are no image Pillow can decode
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF8", "GIF"),
          (b"BM", "BMP"))


def detect_encoding(encoded: bytes) -> str:
    """PNG, JPEG, GIF, BMP or WEBP from the file's first bytes; `other` otherwise."""
    for magic, name in _MAGIC:
        if encoded.startswith(magic):
            return name
    if encoded[:4] == b"RIFF" and encoded[8:12] == b"WEBP":
        return "WEBP"
    return "other"


def image_features(encoded: bytes) -> dict[str, Any]:
    """The image features of one encoded image; pixel features are None when it cannot be
    decoded (its encoding is then `undecodable`) or is too large to decode safely."""
    from PIL import Image

    encoding = detect_encoding(encoded)
    try:
        image = Image.open(io.BytesIO(encoded))
        width, height = image.size
        if width * height > MAX_PIXELS:
            return _header_only(height, width, _color_bands(image), encoding)
        pixels = _as_array(image)
    except Exception:  # Pillow raises many kinds for damaged or unknown files
        return {**dict.fromkeys(IMAGE_FEATURES), "encoding": UNDECODABLE}
    return pixel_features(pixels, encoding)


def pixel_features(pixels: np.ndarray, encoding: str = RAW_ENCODING) -> dict[str, Any]:
    """The image features of decoded pixels: uint8 (or float in 0..255), [H, W] or [H, W, C]."""
    import numpy as np

    array = np.asarray(pixels, dtype=np.float32)
    if array.ndim == 2:
        array = array[..., None]
    height, width, channels = array.shape
    color = array[..., :3] if channels >= 3 else array[..., :1]  # alpha is not brightness
    luminance = color.mean(axis=-1)
    return {
        "height": int(height),
        "width": int(width),
        "channels": int(channels),
        "brightness": float(color.mean() / 255.0),
        "contrast": float(color.std() / 255.0),
        "dark_fraction": float((luminance <= NEAR_BLACK).mean()),
        "bright_fraction": float((luminance >= NEAR_WHITE).mean()),
        "encoding": encoding,
    }


def answer_features(predicted_class: str, probabilities: Sequence[float]) -> dict[str, Any]:
    """The model's answer for one image: the class it chose and its top-1 probability."""
    return {"predicted_class": str(predicted_class),
            "confidence": float(max(probabilities)) if len(probabilities) else None}


def _header_only(height: int, width: int, channels: int, encoding: str) -> dict[str, Any]:
    return {**dict.fromkeys(IMAGE_FEATURES), "height": height, "width": width,
            "channels": channels, "encoding": encoding}


def _color_bands(image: Any) -> int:
    if image.mode == "P":
        return 4 if "transparency" in image.info else 3
    return len(image.getbands())


def _as_array(image: Any) -> np.ndarray:
    """Pixels in 0..255 with the file's own channels (a palette becomes RGB or RGBA)."""
    import numpy as np

    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif image.mode in ("1", "CMYK", "YCbCr", "LAB", "HSV"):
        image = image.convert("L" if image.mode == "1" else "RGB")
    array = np.asarray(image)
    if array.dtype == np.uint16 or image.mode.startswith("I;16"):
        return array.astype(np.float32) / 257.0  # 16-bit PNG: the same 0..255 scale
    if image.mode in ("I", "F"):
        return np.clip(array.astype(np.float32), 0, 255)
    return array
