"""Deterministic hash splits: the same key always lands in the same split."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping

from components.ingest.errors import DataError

_BUCKETS = 1000
_RATIO_TOLERANCE = 1e-6
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def parse_split_ratios(splits: str | Mapping[str, float]) -> dict[str, float]:
    """Validate `{"train": 0.8, "eval": 0.2}` (a dict or its JSON text), keeping its order.

    Raises:
        DataError: not a non-empty dict of names to ratios > 0 that sum to 1.
    """
    if isinstance(splits, str):
        try:
            splits = json.loads(splits)
        except json.JSONDecodeError as error:
            raise DataError(f"splits is not valid JSON ({error}). Received: {splits!r}") from None
    if not isinstance(splits, Mapping) or not splits:
        raise DataError(f"splits must be a non-empty dict of name to ratio. Received: {splits!r}")
    ratios: dict[str, float] = {}
    for name, ratio in splits.items():
        if not isinstance(name, str) or not _SPLIT_NAME.match(name):
            raise DataError(f"split name must match [A-Za-z0-9_-]+. Received: {name!r}")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
            raise DataError(f"split ratio for '{name}' must be a number > 0. Received: {ratio!r}")
        ratios[name] = float(ratio)
    if abs(sum(ratios.values()) - 1.0) > _RATIO_TOLERANCE:
        raise DataError(f"split ratios must sum to 1. Received: {dict(splits)}")
    return ratios


def hash_bucket(key: str | bytes) -> int:
    """The key's bucket in [0, 1000): md5 of its UTF-8 bytes, modulo 1000."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    return int(hashlib.md5(data).hexdigest(), 16) % _BUCKETS


class SplitAssigner:
    """Maps keys to split names by hash bucket against cumulative ratios.

    >>> assign = SplitAssigner({"train": 0.8, "eval": 0.2})
    >>> assign("7/img_0003.png") in ("train", "eval")
    True
    """

    def __init__(self, ratios: Mapping[str, float]):
        self.names = list(ratios)
        self._upper_bounds = []
        cumulative = 0.0
        for ratio in ratios.values():
            cumulative += ratio
            self._upper_bounds.append(round(cumulative * _BUCKETS))
        # Rounding must never leave the top buckets unassigned.
        self._upper_bounds[-1] = _BUCKETS

    def __call__(self, key: str | bytes) -> str:
        """The split name for `key` (a relative path, or raw record bytes)."""
        bucket = hash_bucket(key)
        for name, upper_bound in zip(self.names, self._upper_bounds, strict=True):
            if bucket < upper_bound:
                return name
        raise AssertionError("unreachable: the last upper bound is the bucket count")
