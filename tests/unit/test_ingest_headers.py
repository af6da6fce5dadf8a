"""The Ingest's header pass: its own JPEG/PNG header reader tells what Pillow tells, for every
kind of file real photo folders hold, and the pass runs beside its readers."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from components.ingest import headers
from components.ingest.headers import HeaderPass, SizeLimits
from tests.photo_kinds import KINDS


def _pillow_says(data: bytes) -> tuple[int, int, int] | None:
    with headers._pillow_limit_off():
        return headers._pillow_size(io.BytesIO(data))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_header_check_says_what_pillow_says(kind):
    data = KINDS[kind]()
    width, height, channels = _pillow_says(data)
    check = headers.check_bytes(data, SizeLimits())
    assert (check.problem, check.channels) == (None, channels)
    too_small = SizeLimits(max_pixels=width * height - 1)
    assert headers.check_bytes(data, too_small).problem == (
        f"image is {width}x{height} = {width * height} pixels > "
        f"data.max_pixels {width * height - 1}")


@pytest.mark.parametrize("kind", [kind for kind in sorted(KINDS) if kind.split()[0] in
                                  ("jpeg", "png")])
def test_jpeg_and_png_headers_are_read_without_pillow(kind, monkeypatch):
    data = KINDS[kind]()
    expected = _pillow_says(data)

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("Pillow was asked")

    monkeypatch.setattr(Image, "open", refuse)
    assert headers._lean_size(io.BytesIO(data)) == expected


def test_a_header_the_reader_does_not_follow_goes_to_pillow():
    # A frame header with a height of 0 (the height comes later, in a DNL segment).
    data = bytearray(KINDS["jpeg rgb"]())
    frame = data.index(b"\xff\xc0")
    data[frame + 5:frame + 7] = b"\x00\x00"
    assert headers._lean_size(io.BytesIO(bytes(data))) is None
    assert headers.check_bytes(bytes(data), SizeLimits()).problem is None


def test_the_pass_hands_out_checks_in_order_and_channels_stop_at_the_first_colour(tmp_path):
    paths = []
    for index in range(300):
        path = tmp_path / f"{index:03d}.png"
        path.write_bytes(KINDS["png gray"]() if index else KINDS["png rgb"]())
        paths.append(str(path))
    paths.append(str(tmp_path / "missing.png"))
    header_pass = HeaderPass(paths, SizeLimits())
    assert next(iter(header_pass.channels())) == 3
    checks = header_pass.checks(0, len(paths))
    assert [check.channels for check in checks[:3]] == [3, 1, 1]
    assert checks[-1].problem.startswith("unreadable file: No such file")
    assert header_pass.check(150).channels == 1
