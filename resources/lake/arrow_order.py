"""A lake table's rows as one canonical Arrow table, in the order `deltaport read` prints them;
pure pyarrow (no Spark, no Dagster): what both read engines do with the Arrow they fetch.

In: a `pyarrow.Table` as Spark Connect's `toArrow()` or a PyIceberg scan gives it, and the column
names to print. Out: a table of those columns only (matched case-insensitively, as Spark resolves
them; a column the table lacks is all null, as the Spark read's union gives it), TIME columns stored
as microseconds turned into time64[us], zoned timestamps as naive UTC (Arrow stores UTC: the zone
is dropped, the instants kept), then sorted:
- a datamart's table by its primary key (then `sys_from` for versions), nulls first: the order of
  Python's `sorted` on `(value is not None, value)` (strings by code point: Arrow compares UTF-8
  bytes, the same order), which the value-by-value read used and `rows_as_of` still uses;
- a change stream's table by the `repr` of each value in column order, nulls first: its rows have
  no key the read knows, and this is the order the value-by-value read printed, kept byte for byte
  (the repr of a value is Python's, computed per column; only the sort keys, not rows, are made).
Arrow's sort is stable, as Python's is.
"""

from __future__ import annotations

from collections.abc import Sequence


def canonical(arrow, names: Sequence[str], *, times: Sequence[str] = ()):
    """`arrow`'s columns `names` (case-insensitive; missing ones all null), `times` (stored as
    microseconds since midnight) as time64[us], zoned timestamps as naive UTC."""
    import pyarrow as pa

    by_lower = {n.lower(): n for n in arrow.column_names}
    columns = []
    for name in names:
        column = arrow.column(by_lower[name.lower()]) if name.lower() in by_lower else pa.nulls(arrow.num_rows)
        if name in times and pa.types.is_integer(column.type):
            column = _view(column.cast(pa.int64()), pa.time64("us"))
        elif pa.types.is_timestamp(column.type) and column.type.tz is not None:
            column = _view(column, pa.timestamp(column.type.unit))
        columns.append(column)
    return pa.Table.from_arrays(columns, names=list(names))


def _view(column, kind):
    """The same values (storage and nulls) seen as `kind`: microseconds as a time, a zoned
    timestamp's UTC instants as naive ones."""
    import pyarrow as pa

    return pa.chunked_array([chunk.view(kind) for chunk in column.chunks], kind)


def by_key(table, order: Sequence[str]):
    """`table` sorted by the columns `order`, ascending, nulls first."""
    import pyarrow.compute as pc

    if not table.num_rows or not order:
        return table
    return table.take(pc.sort_indices(table, sort_keys=[(c, "ascending", "at_start") for c in order]))


def by_repr(table, order: Sequence[str]):
    """`table` sorted by the `repr` of its values in the columns `order`, nulls first."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not table.num_rows or not order:
        return table
    keys = pa.table({f"k{i}": pa.array([None if v is None else repr(v) for v in table.column(c).to_pylist()],
                                       pa.string()) for i, c in enumerate(order)})
    indices = pc.sort_indices(keys, sort_keys=[(f"k{i}", "ascending", "at_start") for i in range(len(order))])
    return table.take(indices)
