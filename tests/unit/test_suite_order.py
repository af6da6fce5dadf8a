"""`make test` starts the longest test files first (tests/conftest.py, LONGEST_FIRST): a
renamed file would silently fall back to the end of the queue, and without
`--no-loadscope-reorder` pytest-xdist would sort the files by test count instead."""

from __future__ import annotations

import re

from tests.conftest import AFTER_THE_IMAGE_BUILD, LONGEST_FIRST, REPO


def test_every_file_named_longest_first_exists():
    named = LONGEST_FIRST + AFTER_THE_IMAGE_BUILD
    missing = [name for name in named if not (REPO / "tests" / name).is_file()]
    assert not missing, f"tests/conftest.py's order names files that are gone: {missing}"


def test_every_image_test_file_waits_for_the_build_after_the_longest_files():
    image_files = {f"image/{path.name}" for path in (REPO / "tests" / "image").glob("test_*.py")}
    assert image_files == set(AFTER_THE_IMAGE_BUILD)


def test_make_test_keeps_the_collection_order():
    [parallel] = re.findall(r"^PARALLEL \?= (.*)$", (REPO / "Makefile").read_text(), re.M)
    assert "--dist loadfile" in parallel and "--no-loadscope-reorder" in parallel
