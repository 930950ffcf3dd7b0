"""Sets of integers as ranges: what is missing between the numbers messages claim, computed from
the numbers present, never by walking the span they claim.

A backup key that says chunk 9223372036854775807 makes "the chunks missing below it" a set of
2^63 numbers; as ranges it is one pair. Every function here costs O(k log k) in the k numbers
given, whatever their values, and `render` prints at most `SHOWN` ranges.
"""

from __future__ import annotations

from collections.abc import Iterable

Range = tuple[int, int]  # (first, last), both included
SHOWN = 10  # ranges a reason prints; the rest are counted


def spans(numbers: Iterable[int]) -> list[Range]:
    """The distinct `numbers` as maximal runs of consecutive numbers, ascending."""
    out: list[Range] = []
    for n in sorted(set(numbers)):
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


def gaps(present: Iterable[int], first: int, last: int) -> list[Range]:
    """The numbers of first..last that are not in `present`, as ranges, ascending."""
    out: list[Range] = []
    nxt = first
    for n in sorted(set(present)):
        if n < nxt:
            continue
        if n > last:
            break
        if n > nxt:
            out.append((nxt, n - 1))
        nxt = n + 1
    if nxt <= last:
        out.append((nxt, last))
    return out


def count(ranges: Iterable[Range]) -> int:
    """How many numbers the ranges hold."""
    return sum(last - first + 1 for first, last in ranges)


def render(ranges: list[Range], shown: int = SHOWN) -> str:
    """"2, 4" or "5..999998 (999994 in all)"; beyond `shown` ranges, "... and N more ranges"."""
    parts = [str(a) if a == b else f"{a}..{b}" for a, b in ranges[:shown]]
    if len(ranges) > shown:
        parts.append(f"... and {len(ranges) - shown} more ranges")
    text = ", ".join(parts)
    total = count(ranges)
    return text if total == len(ranges) <= shown else f"{text} ({total} in all)"
