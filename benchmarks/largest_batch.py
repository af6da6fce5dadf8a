"""The largest batch that fits: doubling, then bisection between the last fit and the first
failure.

`fits(batch)` answers True, False, or None when it could not tell (the probe timed out or
failed for another reason); the search then stops and reports what it knows.

Example:

    search_largest_batch(lambda b: b <= 300, start=32, max_batch=4096)
    # {"largest": 296, "first_failure": 304, ...} with resolution 1/32
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def search_largest_batch(
    fits: Callable[[int], bool | None],
    start: int,
    max_batch: int,
    resolution: float = 1 / 32,
) -> dict[str, Any]:
    """Finds the largest batch in [1, max_batch] for which `fits` holds.

    Args:
        fits: probe; True fits, False does not, None unknown (stops the search).
        start: first batch tried; the search doubles up from it, or halves down if it fails.
        max_batch: never probe beyond this; reaching it is reported as `capped`.
        resolution: bisection stops when the gap is at most this fraction of the largest
            fitting batch (at least 1), to bound the number of probes.

    Returns:
        {"largest": last batch that fit (0 if none), "first_failure": smallest batch seen
        failing (None if none), "capped": reached max_batch, "unknown_at": batch whose probe
        could not tell (None if none), "probes": [[batch, True/False/None], ...]}.
    """
    probes: list[list] = []

    def probe(batch: int) -> bool | None:
        answer = fits(batch)
        probes.append([batch, answer])
        return answer

    largest, failure, unknown_at = 0, None, None
    batch = max(1, min(start, max_batch))
    answer = probe(batch)
    if answer is None:
        unknown_at = batch
    elif answer:  # double up
        largest = batch
        while largest < max_batch:
            batch = min(largest * 2, max_batch)
            answer = probe(batch)
            if answer is None:
                unknown_at = batch
                break
            if not answer:
                failure = batch
                break
            largest = batch
    else:  # halve down until something fits
        failure = batch
        while failure > 1:
            batch = failure // 2
            answer = probe(batch)
            if answer is None:
                unknown_at = batch
                break
            if answer:
                largest = batch
                break
            failure = batch
    if failure is not None and unknown_at is None and largest:
        while failure - largest > max(1, int(largest * resolution)):
            batch = (largest + failure) // 2
            answer = probe(batch)
            if answer is None:
                unknown_at = batch
                break
            if answer:
                largest = batch
            else:
                failure = batch
    return {
        "largest": largest,
        "first_failure": failure,
        "capped": failure is None and unknown_at is None and largest >= max_batch,
        "unknown_at": unknown_at,
        "probes": probes,
    }
