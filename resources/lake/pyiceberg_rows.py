"""A lake table's rows as of a delta, read with PyIceberg, value for value as the Spark read gives
them (`resources.lake.read.rows_as_of`, `resources.lake.cdc.cdc_columns_as_of`): what
`deltaport read --engine pyiceberg` prints. No JVM, and no pyspark import either (this module
imports nothing that does).

In: a function opening a lake table by name (``ns.table``; `resources.lake.pyiceberg_read`
bound to a catalog), the source, the table, the delta. Out: (column names, a `pyarrow.Table` of
canonical values in print order: resources/lake/arrow_order.py); `datamart_rows` gives Python dicts.
- A datamart's table: the columns delta N's DDL declares, under the names they had then (the
  changelog meta table `<dm>_meta.changelog`, replayed as the Spark read replays it); TIME back
  from microseconds to `datetime.time`; sorted by primary key.
- A change stream's table: its data columns in table order (not `_order`, `_tombstone`,
  `_event_time_us`), live rows only, binary as bytes, sorted by their values.
Timestamps are naive UTC datetimes, decimals keep their scale, as from Spark.

A delta is read as the Spark read reads it, by `as_of.resolve_as_of`'s rules
(resources/lake/pyiceberg_history.py `state_at`): "not landed" against the source's landed delta
L (its manifest's mark, read once per source: `landed` below, or the caller's `mark`; a lake
written before the mark: the table's newest recorded delta); the table as it is when no delta
after N changed it; the table and its history where the history answers N (so a delta inside a
range run's commit, or one whose tag maintenance dropped); else its own tag `delta_<N>`, or the
newest tag before N for a delta that left the table alone (it has no tag of its own). The one
the Spark read answers and this does not: a delta folded into a later commit where no history is
kept (the Spark read rebuilds it from the increments); here it is a `PyIcebergReadError` saying
so. STARTED IN / FINISHED IN (`datamart_versions`, `stream_versions`) read the history as
`resources.lake.read.versions_in` and `resources.lake.cdc_read.cdc_versions_in` do.
"""

from __future__ import annotations

from resources.codecs.ddl import EntitySchema, replay_changelog
from resources.lake.arrow_order import by_key, by_repr, canonical
from resources.lake.cdc_columns import SNAPSHOT_COLUMNS
from resources.lake.history_forms import LIVE, SYSTEM_COLUMNS, FinishedIn, StartedIn
from resources.lake.pyiceberg_history import OpenTable, landed, landed_through, state_at, versions
from resources.lake.pyiceberg_read import PyIcebergReadError

UNREAD = object()  # `mark` not passed: read the source's manifest for it


def last_landed(open_table: OpenTable, source: str, table: str, *, mark=UNREAD) -> int:
    """L: the last delta landed in `source` (its manifest's mark; a lake written before it: the
    table's own newest recorded delta), as `resources.lake.read.last_landed_delta`."""
    return landed(open_table(f"{source}.{table}"), source, table, _mark(open_table, source, mark))


def _mark(open_table: OpenTable, source: str, mark):
    return landed_through(open_table, source) if mark is UNREAD else mark


def datamart_rows(open_table: OpenTable, datamart: str, table: str, delta: int, *,
                  mark=UNREAD) -> tuple[list[str], list[dict]]:
    """`datamart_table` as Python rows (TIME as `datetime.time`, timestamps naive UTC)."""
    names, rows = datamart_table(open_table, datamart, table, delta, mark=mark)
    return names, rows.to_pylist()


def datamart_table(open_table: OpenTable, datamart: str, table: str, delta: int, *, mark=UNREAD):
    """(columns, Arrow rows) of a datamart's table right after `delta`, by primary key (module
    docstring: which state answers). `mark`: the source's `landed_through`, when the caller
    read it already (once per source); else it is read here."""
    mark = _mark(open_table, datamart, mark)
    entity = entity_as_of(open_table(f"{datamart}_meta.changelog"), datamart, table, delta)
    names = [c.name for c in entity.columns]
    arrow, _ = state_at(open_table, datamart, table, delta, mark=mark)
    return names, by_key(canonical(arrow, names, times=_times(entity)), entity.primary_key)


def datamart_versions(open_table: OpenTable, datamart: str, table: str, form: StartedIn | FinishedIn, *,
                      mark=UNREAD):
    """(columns, Arrow versions) a STARTED IN / FINISHED IN form selects, as
    `resources.lake.read.versions_in`: the columns of the DDL as of the range's last delta, then
    sys_from, sys_to, sys_op; sorted by primary key, then sys_from."""
    entity = entity_as_of(open_table(f"{datamart}_meta.changelog"), datamart, table, form.last)
    names = [*(c.name for c in entity.columns), *SYSTEM_COLUMNS]
    arrow = canonical(versions(open_table, datamart, table, form, mark=_mark(open_table, datamart, mark)), names,
                      times=_times(entity))
    return names, by_key(arrow, [*entity.primary_key, "sys_from"])


def stream_table(open_table: OpenTable, source: str, table: str, delta: int, *, mark=UNREAD):
    """(columns, Arrow live rows) of a change stream's table right after `delta`, by their values
    (module docstring: which state answers): the data columns of the state read (the table's
    columns now from the table and its history, a snapshot's own from a snapshot)."""
    arrow, schema = state_at(open_table, source, table, delta, mark=_mark(open_table, source, mark),
                             current_filter=LIVE)
    names = _data_columns(schema)
    return names, by_repr(canonical(arrow, names), names)


def stream_versions(open_table: OpenTable, source: str, table: str, form: StartedIn | FinishedIn, *,
                    mark=UNREAD):
    """(columns, Arrow versions) a STARTED IN / FINISHED IN form selects, as
    `resources.lake.cdc_read.cdc_versions_in`: the table's data columns, then sys_from, sys_to,
    sys_op; sorted by their values, then sys_from, sys_to."""
    names = _data_columns(open_table(f"{source}.{table}").schema())
    columns = [*names, *SYSTEM_COLUMNS]
    arrow = canonical(versions(open_table, source, table, form, mark=_mark(open_table, source, mark),
                               current_filter=LIVE), columns)
    return columns, by_repr(arrow, [*names, "sys_from", "sys_to"])


def _data_columns(schema) -> list[str]:
    return [f.name for f in schema.fields if f.name not in SNAPSHOT_COLUMNS]


def _times(entity: EntitySchema) -> list[str]:
    return [c.name for c in entity.columns if c.type == "time"]


def entity_as_of(changelog, datamart: str, table: str, delta: int) -> EntitySchema:
    """The table's schema after the last delta landed up to `delta` (its changelog holds the
    datamart's whole DDL history). Each delta's changelog holds the whole DDL, so delta N's own
    rows answer (one delta's file, as `resources.lake.read.entity_as_of`); only an N that has
    none costs the scan of every delta's up to N, which grows with the lake's deltas x tables."""
    fields = ("delta_num", "change_num", "entity_name", "change_query")
    frame = (changelog.scan(row_filter=f"delta_num = {int(delta)}", selected_fields=fields).to_arrow().to_pylist()
             or changelog.scan(row_filter=f"delta_num <= {int(delta)}", selected_fields=fields).to_arrow().to_pylist())
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

