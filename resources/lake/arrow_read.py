"""A lake table's rows as of a delta, or the versions a history form selects, read with Spark and
fetched as Arrow (Spark Connect's `toArrow()`): what `deltaport read` prints with its Spark engine.

In: a Spark session, the lake's layout, a source and table, a delta or a form. Out: (column names,
a `pyarrow.Table` of those columns, in print order: `resources.lake.arrow_order`). The rows are the
ones `resources.lake.read` (datamarts) and `resources.lake.cdc_read` (change streams) give as
Python dicts, from the same DataFrames (`frame_as_of`, `versions_frame_in`, `cdc_live_frame`,
`cdc_versions_frame`); only the way they reach the client differs. Why Arrow: a 100k-row read
spent most of its time turning Arrow batches into Python Rows and dicts, sorting those in Python
and formatting them value by value; here no Python object is made per row (docs/performance.md,
"deltaport read").
"""

from __future__ import annotations

from resources.lake.arrow_order import by_key, by_repr, canonical
from resources.lake.history_forms import SYSTEM_COLUMNS, FinishedIn, StartedIn
from resources.lake.layout import LakeLayout


def datamart_table(spark, layout: LakeLayout, datamart: str, table: str, delta: int, *, last: int | None = None,
                   mark=None):
    """(the DDL's columns as of `delta`, the table's rows right after it, by primary key). `last`:
    the table's newest recorded delta, `mark`: the datamart's lake mark, when the caller has just
    read them (`frame_as_of`)."""
    from resources.lake.read import frame_as_of

    entity, df = frame_as_of(spark, layout, datamart, table, delta, last=last, mark=mark)
    names = [c.name for c in entity.columns]
    return names, by_key(_arrow(df, names, entity), entity.primary_key)


def datamart_versions(spark, layout: LakeLayout, datamart: str, table: str, form: StartedIn | FinishedIn):
    """(the DDL's columns then sys_from, sys_to, sys_op; the versions `form` selects, by primary
    key then sys_from)."""
    from resources.lake.read import versions_frame_in

    entity, df = versions_frame_in(spark, layout, datamart, table, form)
    names = [*(c.name for c in entity.columns), *SYSTEM_COLUMNS]
    return names, by_key(_arrow(df, names, entity), [*entity.primary_key, "sys_from"])


def stream_table(spark, layout: LakeLayout, source: str, table: str, delta: int, *, last: int | None = None,
                 mark=None):
    """(a change stream table's data columns, its live rows right after `delta`, by their values).
    `last`, `mark`: as `datamart_table` takes them."""
    from resources.lake.cdc_read import cdc_live_frame, require_table

    require_table(spark, layout, source, table)
    names, df = cdc_live_frame(spark, layout, source, table, delta, last=last, mark=mark)
    return names, by_repr(canonical(df.toArrow(), names), names)


def stream_versions(spark, layout: LakeLayout, source: str, table: str, form: StartedIn | FinishedIn, *, last: int):
    """(data columns then sys_from, sys_to, sys_op; the versions `form` selects, by their values
    then sys_from, sys_to). `last`: the table's newest recorded delta (the history's bound)."""
    from resources.lake.cdc_read import cdc_versions_frame

    names, df = cdc_versions_frame(spark, layout, source, table, form, last=last)
    columns = [*names, *SYSTEM_COLUMNS]
    return columns, by_repr(canonical(df.toArrow(), columns), [*names, "sys_from", "sys_to"])


def _arrow(df, names, entity):
    """The DataFrame's rows as canonical Arrow (TIME columns from microseconds)."""
    return canonical(df.toArrow(), names, times=[c.name for c in entity.columns if c.type == "time"])
