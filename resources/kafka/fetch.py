"""Fetch a few known messages by offset (a delta's changelog, a re-check): driver-side, small."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from resources.kafka.scan import scan


def fetch_values(bootstrap: str, topic: str, coordinates: Iterable[tuple[int, int]], *,
                 config: Mapping[str, object] | None = None, timeout: float = 30.0) -> dict[tuple[int, int], bytes]:
    """{(partition, offset): value} for the given coordinates, reading only the ranges between
    the first and last wanted offset of each partition."""
    wanted: dict[int, set[int]] = {}
    for p, o in coordinates:
        wanted.setdefault(p, set()).add(o)
    ranges = {p: (min(offs), max(offs) + 1) for p, offs in wanted.items()}
    return {(m.partition, m.offset): m.value or b"" for m in scan(bootstrap, topic, ranges, config=config, timeout=timeout)
            if m.offset in wanted[m.partition]}
