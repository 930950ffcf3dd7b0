"""Read a Prostore table back from the lake as it was after delta N, as `resources/lake/as_of.py`
resolves it (`history_read.state_as_of`: the table as it is, its history, the newest tag at or
below N, or, for a delta a range run folded into one commit, the state before it plus the deltas'
changes), N bounded by the datamart's landed delta (`landed_and_recorded`).

Rows come back as dicts of the canonical Python values of `resources.codecs.types` (TIME
turned back from microseconds into `datetime.time`, TIMESTAMP as naive UTC datetimes), data
columns only, in the DDL's column order, so they compare equal to the emulator's truth.

"The DDL" is the changelog landed with that delta: after a column change the Iceberg table
still holds dropped columns and the old names of renamed ones (resources/lake/prostore.py),
but a read as of delta N returns exactly the columns delta N's DDL declares, each under the
name it had then (a column added later does not exist in the older `delta_<N>` snapshot and
is not asked for).
"""

from __future__ import annotations

import datetime as dt

from resources.codecs.ddl import EntitySchema, replay_changelog
from resources.codecs.types import micros_to_time
from resources.errors import DeltaportError
from resources.lake.history_forms import FinishedIn, StartedIn
from resources.lake.history_read import LakeMark, read_mark, versions_frame
from resources.lake.layout import LakeLayout
from resources.lake.prostore import changelog_history, data_tables
from resources.lake.prostore_snapshot import snapshot_as_of
from resources.spark.iceberg import table_exists
from resources.spark.iceberg_reads import last_applied_deltas


class UnknownTableError(DeltaportError):
    pass


def last_landed_delta(spark, layout: LakeLayout, source: str, table: str, *, mark: LakeMark | None = None) -> int:
    """L, the last delta landed in `source.table` (a datamart's table or a change stream's): the
    source's landed delta, which every table answers as of (a table a delta left alone has no
    commit and no tag for it). `mark`: the source's lake mark, when the caller has read it."""
    return landed_and_recorded(spark, layout, source, table, mark=mark)[0]


def landed_and_recorded(spark, layout: LakeLayout, source: str, table: str, *,
                        mark: LakeMark | None = None) -> tuple[int, int]:
    """(L, R): the source's landed delta, the bound of every read as of a delta, from the lake's
    own mark (a lake written before it: the table's newest recorded delta, since every table was
    then tagged every delta); and the table's newest recorded delta, the bound of its history
    read (R > L only while a run is in flight or died between tables). Raises `UnknownTableError`
    when the table does not exist or records no delta."""
    ident = layout.snapshot(source, table)
    exists = table_exists(spark, ident)
    recorded = last_applied_deltas(spark, [ident]).get(ident) if exists else None
    if recorded is None:
        raise UnknownTableError(f"no delta of {source}.{table} has landed yet "
                                f"({ident} {'records none' if exists else 'does not exist'})")
    mark = read_mark(spark, layout, source) if mark is None else mark
    return mark.landed(recorded), recorded


def entity_as_of(spark, layout: LakeLayout, datamart: str, table: str, delta_num: int) -> EntitySchema:
    """The table's schema as delta `delta_num`'s changelog (or the last landed before it) declares it.
    Each delta's changelog holds the whole DDL, so delta N's own partition answers; only an N
    that has none (not landed) costs the read of every delta's up to N, which grows with the lake."""
    history = (changelog_history(spark, layout, datamart, since=delta_num, until=delta_num)
               or changelog_history(spark, layout, datamart, until=delta_num))
    landed = sorted(n for n in history if n <= delta_num)
    if not landed:
        raise UnknownTableError(f"datamart {datamart!r} has no delta landed up to {delta_num}")
    tables = data_tables(replay_changelog(history[landed[-1]]))
    if table not in tables:
        raise UnknownTableError(f"{datamart}.{table} is not a table as of delta {delta_num}; "
                                f"tables: {', '.join(sorted(tables)) or 'none'}")
    return tables[table]


def rows_as_of(spark, layout: LakeLayout, datamart: str, table: str, delta_num: int, *,
               mark: LakeMark | None = None) -> list[dict]:
    """The table's rows right after delta `delta_num`, sorted by primary key. `mark`: the
    datamart's lake mark, when the caller has read it (a read of several tables reads it once)."""
    entity, df = frame_as_of(spark, layout, datamart, table, delta_num, mark=mark)
    return _sorted_rows(df, entity, entity.primary_key)


def frame_as_of(spark, layout: LakeLayout, datamart: str, table: str, delta_num: int, *, last: int | None = None,
                mark: LakeMark | None = None):
    """(the table's schema as of delta `delta_num`, a DataFrame of its rows then: its DDL's
    columns, unsorted, TIME as microseconds). `last`: the table's newest recorded delta (R), when
    the caller has just read it (`landed_and_recorded`: it is not read again for the current
    state); `mark`: the datamart's lake mark, likewise. Raises `DeltaNotLandedError` for a delta
    above the datamart's landed one."""
    entity = entity_as_of(spark, layout, datamart, table, delta_num)
    ident = layout.snapshot(datamart, table)
    if not table_exists(spark, ident):
        raise UnknownTableError(f"{ident} does not exist in the lake yet")
    names = [c.name for c in entity.columns]
    df = snapshot_as_of(spark, layout, datamart, table, delta_num, entity.primary_key, last=last, mark=mark)
    return entity, df.select(*[f"`{n}`" for n in names])


def versions_in(spark, layout: LakeLayout, datamart: str, table: str, form: StartedIn | FinishedIn) -> list[dict]:
    """The row versions a STARTED IN or FINISHED IN form selects, with `sys_from`, `sys_to`,
    `sys_op`, in the columns of the DDL as of the range's last delta (a column a version did not
    have reads None), sorted by primary key, then `sys_from`."""
    entity, df = versions_frame_in(spark, layout, datamart, table, form)
    return _sorted_rows(df, entity, [*entity.primary_key, "sys_from"])


def versions_frame_in(spark, layout: LakeLayout, datamart: str, table: str, form: StartedIn | FinishedIn):
    """(the table's schema as of the range's last delta, a DataFrame of the versions `form`
    selects: `versions_in`'s columns, unsorted, TIME as microseconds)."""
    entity = entity_as_of(spark, layout, datamart, table, form.last)
    landed, recorded = landed_and_recorded(spark, layout, datamart, table)
    if form.last > landed:
        raise UnknownTableError(f"{datamart}.{table}: delta {form.last} has not landed (last landed: {landed})")
    names = [c.name for c in entity.columns]
    return entity, versions_frame(spark, layout, datamart, table, form, names, last=recorded)


def _sorted_rows(df, entity: EntitySchema, order: list[str]) -> list[dict]:
    times = {c.name for c in entity.columns if c.type == "time"}
    out = []
    for r in df.collect():
        row = r.asDict()
        for name in times:
            if row[name] is not None:
                row[name] = micros_to_time(row[name])
        out.append(row)
    return sorted(out, key=lambda row: tuple(_sortable(row[k]) for k in order))


def _sortable(value):
    return (value is not None, value if not isinstance(value, dt.time) else value.isoformat())
