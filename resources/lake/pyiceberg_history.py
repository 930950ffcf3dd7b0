"""A lake table's history read with PyIceberg (no JVM, no pyspark import), deciding as the Spark
read decides (resources/lake/history_read.py): which deltas the history answers, and from which
tables.

In: a function opening a lake table by name (``ns.table``), the source and the table. Out: Arrow
tables for resources/lake/pyiceberg_rows.py to turn into rows:
- `state_at`: the snapshot table's rows as of delta N where its history answers N (the table as
  it is for its last applied delta, else the versions current at N from the table and its
  history), or None where it does not (a delta before the history began: its tag);
- `versions`: the versions a STARTED IN / FINISHED IN form selects, or `HistoryNotKeptError`
  where the history does not answer the form exactly (never fewer rows than asked for);
- `close_times`: each landed delta's close time, from the source's manifest (for AS OF a time).

Guarantees: the history is read up to the snapshot's last applied delta only (a delta whose
history commit landed and whose MERGE did not is never half-seen); the WHERE texts are
resources/lake/history_forms.py's, the ones Spark runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING

from resources.lake.history_forms import HISTORY_FROM_PROPERTY, AsOfDelta, Form, check_covered, covers
from resources.lake.pyiceberg_read import NoSuchLakeTableError, PyIcebergReadError, last_delta, read_history

if TYPE_CHECKING:
    import pyarrow as pa

OpenTable = Callable[[str], object]  # "ns.table" -> a pyiceberg Table


def history_start(table) -> int | None:
    """The first delta whose closed versions the snapshot table's history holds, or None."""
    value = table.properties.get(HISTORY_FROM_PROPERTY)
    return int(value) if value is not None and str(value).lstrip("-").isdigit() else None


def history_table(open_table: OpenTable, source: str, table: str):
    """The history table of `source.table`, or None when none exists yet (no version closed)."""
    try:
        return open_table(f"{source}_history.{table}")
    except NoSuchLakeTableError:
        return None


def last_applied(snapshot, source: str, table: str) -> int:
    found = last_delta(snapshot)
    if found is None:
        raise PyIcebergReadError(f"no delta of {source}.{table} has landed yet")
    return found


def state_at(open_table: OpenTable, source: str, table: str, delta: int, *,
             current_filter: str | None = None) -> pa.Table | None:
    """The snapshot table's rows as of `delta` (every column the table has now; `current_filter`
    on its rows, a change stream's `LIVE`), where its history answers `delta`; None otherwise."""
    snapshot = open_table(f"{source}.{table}")
    if not covers(history_start(snapshot), AsOfDelta(delta)):
        return None
    last = last_delta(snapshot)
    if last is None or delta > last:
        return None
    if delta == last:  # the table as it is
        return snapshot.scan(row_filter=current_filter or "true").to_arrow()
    return read_history(snapshot, history_table(open_table, source, table), AsOfDelta(delta), last,
                        current_filter=current_filter)


def versions(open_table: OpenTable, source: str, table: str, form: Form, *,
             current_filter: str | None = None) -> pa.Table:
    """The versions `form` selects (data columns, sys_from, sys_to, sys_op, ...). Raises
    `PyIcebergReadError` when the form's last delta has not landed, `HistoryNotKeptError` when the
    history does not answer the form exactly."""
    snapshot = open_table(f"{source}.{table}")
    last = last_applied(snapshot, source, table)
    if form.last > last:
        raise PyIcebergReadError(f"{source}.{table}: delta {form.last} has not landed (last landed: {last})")
    check_covered(source, table, history_start(snapshot), form)
    return read_history(snapshot, history_table(open_table, source, table), form, last,
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
