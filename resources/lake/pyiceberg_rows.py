"""A lake table's rows as of a delta, read with PyIceberg, value for value as the Spark read gives
them (`resources.lake.read.rows_as_of`, `resources.lake.cdc.cdc_columns_as_of`): what
`deltaport read --engine pyiceberg` prints. No JVM, and no pyspark import either (this module
imports nothing that does).

In: a function opening a lake table by name (``ns.table``; `resources.lake.pyiceberg_read`
bound to a catalog), the source, the table, the delta. Out: (column names, rows as dicts of
canonical Python values).
- A datamart's table: the columns delta N's DDL declares, under the names they had then (the
  changelog meta table `<dm>_meta.changelog`, replayed as the Spark read replays it); TIME back
  from microseconds to `datetime.time`; sorted by primary key.
- A change stream's table: its data columns in table order (not `_order`, `_tombstone`,
  `_event_time_us`), live rows only, binary as bytes, sorted by their values.
Timestamps are naive UTC datetimes, decimals keep their scale, as from Spark.

Only a delta with its own tag `delta_<N>` is read here: a delta a range run folded into a later
commit is rebuilt from the increments by the Spark read; here it is a `PyIcebergReadError`
saying so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from resources.codecs.ddl import EntitySchema, replay_changelog
from resources.codecs.types import micros_to_time
from resources.lake.cdc_columns import SNAPSHOT_COLUMNS
from resources.lake.pyiceberg_read import PyIcebergReadError, delta_snapshot_id, last_delta

OpenTable = Callable[[str], object]  # "ns.table" -> a pyiceberg Table


def last_landed(open_table: OpenTable, source: str, table: str) -> int:
    """The last delta landed in `source.table` (as `resources.lake.read.last_landed_delta`)."""
    found = last_delta(open_table(f"{source}.{table}"))
    if found is None:
        raise PyIcebergReadError(f"no delta of {source}.{table} has landed yet")
    return found


def datamart_rows(open_table: OpenTable, datamart: str, table: str, delta: int) -> tuple[list[str], list[dict]]:
    """(columns, rows) of a datamart's table right after `delta`."""
    entity = _entity(open_table(f"{datamart}_meta.changelog"), datamart, table, delta)
    names = [c.name for c in entity.columns]
    rows = _tag_rows(open_table(f"{datamart}.{table}"), delta, names)
    times = [c.name for c in entity.columns if c.type == "time"]
    for row in rows:
        for name in times:
            if row[name] is not None:
                row[name] = micros_to_time(row[name])
    return names, sorted(rows, key=lambda row: tuple(_sortable(row[k]) for k in entity.primary_key))


def stream_rows(open_table: OpenTable, source: str, table: str, delta: int) -> tuple[list[str], list[dict]]:
    """(columns, live rows) of a change stream's table right after `delta`."""
    lake_table = open_table(f"{source}.{table}")
    snapshot = lake_table.metadata.snapshot_by_id(delta_snapshot_id(lake_table, delta))
    schema = next((s for s in lake_table.metadata.schemas if s.schema_id == snapshot.schema_id),
                  lake_table.schema())
    names = [f.name for f in schema.fields if f.name not in SNAPSHOT_COLUMNS]
    rows = [r for r in _tag_rows(lake_table, delta, [*names, "_tombstone"]) if not r.pop("_tombstone")]
    return names, sorted(rows, key=lambda row: [(v is not None, repr(v)) for v in row.values()])


def _entity(changelog, datamart: str, table: str, delta: int) -> EntitySchema:
    """The table's schema after the last delta landed up to `delta` (its changelog holds the
    datamart's whole DDL history)."""
    frame = changelog.scan(row_filter=f"delta_num <= {int(delta)}", selected_fields=(
        "delta_num", "change_num", "entity_name", "change_query")).to_arrow().to_pylist()
    if not frame:
        raise PyIcebergReadError(f"datamart {datamart!r} has no delta landed up to {delta}")
    last = max(r["delta_num"] for r in frame)
    records = sorted((r for r in frame if r["delta_num"] == last), key=lambda r: r["change_num"])
    entities = replay_changelog({"changeNum": r["change_num"], "entityName": r["entity_name"],
                                 "changeQuery": r["change_query"]} for r in records)
    tables = {name: e for name, e in entities.items() if e.kind == "table"}
    if table not in tables:
        raise PyIcebergReadError(f"{datamart}.{table} is not a table as of delta {delta}; "
                                 f"tables: {', '.join(sorted(tables)) or 'none'}")
    return tables[table]


def _tag_rows(lake_table, delta: int, names: list[str]) -> list[dict]:
    """The rows of the `delta_<N>` snapshot, `names` only (matched case-insensitively, as Spark
    resolves them), under those names; timestamps with a zone as naive UTC."""
    arrow = lake_table.scan(snapshot_id=delta_snapshot_id(lake_table, delta), selected_fields=tuple(names),
                            case_sensitive=False).to_arrow()
    by_lower = {n.lower(): n for n in arrow.column_names}
    arrow = arrow.select([by_lower[n.lower()] for n in names]).rename_columns(names)
    rows = arrow.to_pylist()
    zoned = [f.name for f in arrow.schema if getattr(f.type, "tz", None)]
    for row in rows:
        for name in zoned:
            if row[name] is not None:
                row[name] = row[name].astimezone(dt.timezone.utc).replace(tzinfo=None)
    return rows


def _sortable(value):
    return (value is not None, value if not isinstance(value, dt.time) else value.isoformat())
