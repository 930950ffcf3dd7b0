"""A lake table's history read with PyIceberg (no JVM, no pyspark import), deciding as the Spark
read decides (resources/lake/history_read.py): which deltas the history answers, and from which
tables.

In: a function opening a lake table by name (``ns.table``), the source and the table. Out: Arrow
tables for resources/lake/pyiceberg_rows.py to turn into rows:
- `landed_through`: L, the source's landed delta as its manifest records it (`as_of`), read
  once per source and query by the callers;
- `state_at`: the snapshot table's rows as of delta N, by `as_of.resolve_as_of`'s rules: the
  table as it is when no delta after N changed it, the versions current at N from the table and
  its history where the history answers N, else the snapshot of its tag `delta_<N>` or of the
  newest tag before N (a delta commits only to the tables it changes); no rows where the table
  had none; `PyIcebergReadError` for a delta inside a range run's commit the history does not
  answer (the Spark read rebuilds it);
- `versions`: the versions a STARTED IN / FINISHED IN form selects, or `HistoryNotKeptError`
  where the history does not answer the form exactly (never fewer rows than asked for);
- `close_times`: each landed delta's close time, from the source's manifest (for AS OF a time).

Guarantees: "not landed" is decided against L (the manifest's mark; a lake written before it:
the table's own newest recorded delta, as before), the history is read up to R, the snapshot
table's own newest recorded delta (a delta whose history commit landed and whose MERGE did not
is never half-seen; a delta above L whose MERGE did land is never read as of a delta <= L); the
WHERE texts are resources/lake/history_forms.py's, the ones Spark runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING

from resources.lake.as_of import Absent, Current, DeltaNotLandedError, FromFold, FromHistory, source_landed
from resources.lake.history_forms import AsOfDelta, Form, check_covered
from resources.lake.pyiceberg_read import (
    NoSuchLakeTableError,
    PyIcebergReadError,
    history_from,
    lake_mark,
    last_delta,
    ranges_text,
    read_history,
    resolve,
)

if TYPE_CHECKING:
    import pyarrow as pa

OpenTable = Callable[[str], object]  # "ns.table" -> a pyiceberg Table


def history_start(table) -> int | None:
    """The first delta whose closed versions the snapshot table's history holds, or None."""
    return history_from(table)


def landed_through(open_table: OpenTable, source: str) -> int | None:
    """The source's lake mark (`as_of.LANDED_PROPERTY` on `<source>_meta.manifest`), or None: no
    manifest yet, or a lake written before the mark (then each table's newest recorded delta
    stands for it: `as_of.source_landed`)."""
    try:
        return lake_mark(open_table(f"{source}_meta.manifest"))
    except NoSuchLakeTableError:
        return None


def history_table(open_table: OpenTable, source: str, table: str):
    """The history table of `source.table`, or None when none exists yet (no version closed)."""
    try:
        return open_table(f"{source}_history.{table}")
    except NoSuchLakeTableError:
        return None


def last_applied(snapshot, source: str, table: str) -> int:
    """R: the newest delta recorded in the snapshot table (`last_delta`); raises when none is."""
    found = last_delta(snapshot)
    if found is None:
        raise PyIcebergReadError(f"no delta of {source}.{table} has landed yet")
    return found


def landed(snapshot, source: str, table: str, mark: int | None) -> int:
    """L for `source.table`: the source's lake `mark`, or without one (a lake written before it)
    the table's newest recorded delta; raises when neither is known."""
    found = source_landed(mark, last_delta(snapshot))
    if found is None:
        raise PyIcebergReadError(f"no delta of {source}.{table} has landed yet")
    return found


def state_at(open_table: OpenTable, source: str, table: str, delta: int, *, mark: int | None,
             current_filter: str | None = None):
    """(Arrow rows, the schema they are in) of the snapshot table as of `delta` (module
    docstring): from the table and its history, every column the table has now; from a snapshot,
    that snapshot's columns. `mark`: the source's `landed_through`. `current_filter`: a clause
    its rows must meet (a change stream's `LIVE`). Raises `as_of.DeltaNotLandedError` for a
    delta above the source's landed one."""
    import pyarrow as pa

    snapshot = open_table(f"{source}.{table}")
    found = resolve(snapshot, delta, mark=mark, name=f"{source}.{table}")
    if isinstance(found, FromHistory):
        return read_history(snapshot, history_table(open_table, source, table), AsOfDelta(delta), found.recorded,
                            current_filter=current_filter), snapshot.schema()
    if isinstance(found, FromFold):
        raise PyIcebergReadError(
            f"{source}.{table} as of delta {int(delta)}: inside the range run's commit of deltas "
            f"{ranges_text(list(found.deltas))}, and the lake keeps no history answering it; the Spark "
            "engine rebuilds it from the increments (--engine spark)")
    if isinstance(found, Absent):
        return pa.table({}), snapshot.schema()
    snapshot_id = snapshot.metadata.current_snapshot_id if isinstance(found, Current) else found.snapshot_id
    return (snapshot.scan(row_filter=current_filter or "true", snapshot_id=snapshot_id).to_arrow(),
            schema_of(snapshot, snapshot_id))


def schema_of(snapshot, snapshot_id):
    """The schema a snapshot of the table was written in (time travel reads it in that one)."""
    found = snapshot.metadata.snapshot_by_id(snapshot_id)
    return next((s for s in snapshot.metadata.schemas if found is not None and s.schema_id == found.schema_id),
                snapshot.schema())


def versions(open_table: OpenTable, source: str, table: str, form: Form, *, mark: int | None,
             current_filter: str | None = None) -> pa.Table:
    """The versions `form` selects (data columns, sys_from, sys_to, sys_op, ...). Raises
    `as_of.DeltaNotLandedError` when the form's last delta is above the source's landed one
    (`mark`: its `landed_through`), `HistoryNotKeptError` when the history does not answer the
    form exactly. The history is read up to the table's own newest recorded delta."""
    snapshot = open_table(f"{source}.{table}")
    recorded = last_applied(snapshot, source, table)
    last = landed(snapshot, source, table, mark)
    if form.last > last:
        raise DeltaNotLandedError(f"{source}.{table}: delta {form.last} has not landed (last landed: {last})")
    check_covered(source, table, history_start(snapshot), form)
    return read_history(snapshot, history_table(open_table, source, table), form, recorded,
                        current_filter=current_filter)


def close_times(open_table: OpenTable, source: str) -> dict[int, dt.datetime]:
    """{delta: its close time, naive UTC} of the source's landed deltas, from its manifest (a
    change stream's delta time is its watermark; a delta without one is left out)."""
    try:
        manifest = open_table(f"{source}_meta.manifest")
    except NoSuchLakeTableError:
        return {}
    latest: dict[int, int] = {}
    rows = manifest.scan(selected_fields=("delta_num", "delta_date_us")).to_arrow().to_pylist()
    for row in rows:
        if row["delta_date_us"] is not None:
            latest[row["delta_num"]] = max(row["delta_date_us"], latest.get(row["delta_num"], row["delta_date_us"]))
    return {n: dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us) for n, us in latest.items()}
