"""How many messages to read from each partition of a topic next: a fair share of a budget.

Pure (no broker): in, each partition's low and high watermarks and the offset reading has reached;
out, one offset range per partition, together at most the budget, and what is left beyond them.
Used by Prostore's index ingestion and the change streams' sealer alike.
"""

from __future__ import annotations

from collections.abc import Mapping


def plan_ranges(watermarks: Mapping[int, tuple[int, int]], progress: Mapping[int, int],
                budget: int) -> tuple[dict[int, tuple[int, int]], int]:
    """Per partition, the next range to read: from the index's progress (or the low watermark,
    if retention removed it) to the high watermark, at most `budget` messages in all, shared
    fairly. Returns the ranges and the messages left beyond them."""
    pending = {p: (max(progress.get(p, lo), lo), hi) for p, (lo, hi) in watermarks.items()}
    pending = {p: r for p, r in pending.items() if r[1] > r[0]}
    ranges: dict[int, tuple[int, int]] = {}
    left = budget
    while pending and left > 0:
        share = max(1, left // len(pending))
        for p in sorted(pending):
            start, hi = pending[p]
            take = min(share, hi - start, left)
            if take <= 0:
                continue
            lo0 = ranges.get(p, (start, start))[0]
            ranges[p] = (lo0, start + take)
            left -= take
            pending[p] = (start + take, hi)
        pending = {p: r for p, r in pending.items() if r[1] > r[0]}
    remaining = sum(hi - lo for lo, hi in pending.values())
    return ranges, remaining
