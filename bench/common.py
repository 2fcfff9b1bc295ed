"""What several benchmarks share: a free loopback port, and MB/s over the median of timings."""

from __future__ import annotations

import statistics


def mb_s(nbytes: int, seconds) -> float | None:
    """``nbytes`` in MB (10**6 bytes) per second, over the median of ``seconds`` (wall or CPU
    seconds of repeated runs); None where that median is not above 0."""
    med = statistics.median(seconds)
    return nbytes / med / 1e6 if med > 0 else None
