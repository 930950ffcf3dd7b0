"""One DataFrame from many (one per table of a wide source), unioned as a balanced tree.

Why: `reduce(unionAll)` over n frames nests the plan n deep, and pyspark's Connect client
serializes a plan recursively: at 500 tables (two metadata frames each) the step failed with
`RecursionError` (bench/width_bench.py --wide 500). A balanced tree is log2(n) deep and the same
union, row for row.
"""

from __future__ import annotations

from collections.abc import Sequence


def union_all(frames: Sequence, *, by_name: bool = False):
    """The union of `frames` (at least one), positional (`unionAll`) or by column name."""
    if not frames:
        raise ValueError("union_all needs at least one frame")
    level = list(frames)
    while len(level) > 1:
        paired = [(a.unionByName(b) if by_name else a.unionAll(b)) for a, b in zip(level[::2], level[1::2])]
        level = paired + ([level[-1]] if len(level) % 2 else [])
    return level[0]
