"""`make test` starts the longest test files first (tests/conftest.py, LONGEST_FIRST): a
renamed file would silently fall back to the end of the queue, and without
`--no-loadscope-reorder` pytest-xdist would sort the files by test count instead."""

from __future__ import annotations

import re

from tests.conftest import LONGEST_FIRST, REPO


def test_every_file_named_longest_first_exists():
    missing = [name for name in LONGEST_FIRST if not (REPO / "tests" / name).is_file()]
    assert not missing, f"LONGEST_FIRST names files that are gone: {missing}"


def test_make_test_keeps_the_collection_order():
    [parallel] = re.findall(r"^PARALLEL \?= (.*)$", (REPO / "Makefile").read_text(), re.M)
    assert "--dist loadfile" in parallel and "--no-loadscope-reorder" in parallel
