"""A user mart as `deltaport read` prints it: `lake.<source>_marts.<asset>` (an `@delta_asset`'s
rows, one set per delta, partitioned by `delta_num`: platform_assets/build_on.py), read by its
delta column, never by time travel. Pure pyarrow and text; no Spark, no Dagster import.

In: what an engine fetched from the mart table (its commits' summaries, its `delta_num` values,
the rows of one delta as Arrow). Out: the deltas landed in the mart, the delta a read asks for
(or a `MartReadError` saying why it cannot be read), and (columns, rows) in print order: the
mart's columns without `delta_num`, sorted by the repr of their values in column order (a mart
has no key the read knows), as a change stream's table is.

Which deltas have landed: every delta a commit of the mart replaced (its summary's
`deltaport.deltas`, also for a delta whose rows are none), and every `delta_num` in its rows (a
commit that maintenance expired leaves its rows). A delta named by neither has not landed in the
mart: not yet, or its run failed there (the snapshot may have landed without it).
"""

from __future__ import annotations

from collections.abc import Iterable

from resources.errors import DeltaportError
from resources.lake.arrow_order import by_repr, canonical
from resources.lake.pyiceberg_read import ranges_text

DELTA_COLUMN = "delta_num"


class MartReadError(DeltaportError):
    """The mart cannot answer the read as asked (see the message)."""


def mart_ident(source: str, asset: str) -> str:
    """The mart's table, without the catalog: `<source>_marts.<asset>`."""
    return f"{source}_marts.{asset}"


def landed_deltas(summaries: Iterable[str | None], delta_nums: Iterable[int | None]) -> list[int]:
    """The deltas landed in the mart, ascending: the commits' `deltaport.deltas` ("3-5,9") and the
    rows' delta numbers."""
    landed = {int(n) for n in delta_nums if n is not None}
    for text in summaries:
        for part in (text or "").split(","):
            first, _, last = part.strip().partition("-")
            if first.isdigit():
                landed.update(range(int(first), int(last or first) + 1))
    return sorted(landed)


def pick_delta(name: str, landed: list[int], delta: int | None) -> int:
    """The delta to read: `delta`, or the last one landed when None."""
    if not landed:
        raise MartReadError(f"{name}: no delta has landed in the mart yet")
    if delta is None:
        return landed[-1]
    if delta not in landed:
        raise MartReadError(f"{name}: delta {delta} has not landed in the mart (landed: {ranges_text(landed)}); "
                            "a run that failed there is run again by the next `deltaport sync`")
    return delta


def mart_rows(arrow) -> tuple[list[str], object]:
    """(columns, rows) of one delta's Arrow rows, in print order (module docstring)."""
    names = [n for n in arrow.column_names if n.lower() != DELTA_COLUMN]
    return names, by_repr(canonical(arrow, names), names)

