"""Reading a table's row versions with Spark: Prostore's FOR SYSTEM_TIME forms on the union of
its snapshot table (current versions) and its history table (closed versions).

What flows through: a form (`resources/lake/history_forms.py`) becomes one WHERE clause on each
table; the rows come back with the data columns asked for (NULL where a version predates a
column) and `sys_from`, `sys_to`, `sys_op`. The same clauses are what a user writes in Spark SQL,
Trino or PyIceberg (docs/using.md, "Querying history").

Guarantees: the history is read only up to the snapshot's last applied delta (`last`), so a
delta whose history was written and whose MERGE was not (a crash between the two commits, or a
run in flight) is never half-seen; a form the history cannot answer exactly (deltas from before
the lake kept history: `history_start`) raises `HistoryNotKeptError` instead of answering less.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from resources.lake.history_forms import AsOfDelta, Form, check_covered, covers, history_where
from resources.lake.layout import LakeLayout
from resources.lake.prostore import _c
from resources.lake.prostore_history import history_ident, history_start
from resources.spark.iceberg import table_exists
from resources.spark.iceberg_reads import last_applied_deltas, state_as_of_delta


def state_as_of(spark, layout: LakeLayout, source: str, table: str, delta_num: int, *,
                current_filter: str | None = None, last: int | None = None):
    """The snapshot table's rows as of `delta_num` (every column it has): where its history
    answers that delta, without a tag (the table as it is for its last applied delta, the versions
    current at N from the table and its history for an earlier N); else `state_as_of_delta` (its
    tag, or an `InsideFold` for the caller to rebuild). `current_filter`: as `versions_frame` takes it.
    `last`: the table's last applied delta, when the caller has just read it (a read of the current
    state): `delta_num` == `last` is then the table as it is, with no metadata read again."""
    ident = layout.snapshot(source, table)
    if last is not None and last == delta_num:
        return spark.table(ident)
    start = history_start(spark, ident)
    last = last_applied_deltas(spark, [ident]).get(ident) if covers(start, AsOfDelta(delta_num)) else None
    if last is not None and last == delta_num:  # the last applied delta: the table as it is
        return spark.table(ident)
    if last is None or delta_num > last:
        return state_as_of_delta(spark, ident, delta_num)
    columns = [f.name for f in spark.table(ident).schema.fields if f.name != "sys_from"]
    return versions_frame(spark, layout, source, table, AsOfDelta(delta_num), columns, last=last, start=start,
                          current_filter=current_filter).drop("sys_to", "sys_op")


def versions_frame(spark, layout: LakeLayout, source: str, table: str, form: Form, columns: Sequence[str], *,
                   last: int, start: int | None = None, current_filter: str | None = None):
    """The versions `form` selects, as a DataFrame of `columns` + sys_from, sys_to, sys_op.

    `last`: the snapshot's last applied delta (the history is read up to it). `start`: its
    `history_start`, when the caller has read it. Raises `HistoryNotKeptError` when the history
    does not answer the form exactly. `current_filter`: a clause the snapshot table's rows must
    also meet to be versions (a change stream's: not a tombstone)."""
    from pyspark.sql import functions as F

    snapshot = layout.snapshot(source, table)
    start = history_start(spark, snapshot) if start is None else start
    check_covered(source, table, start, form)

    def project(frame, sys_to, sys_op):
        have = {c.lower(): c for c in frame.columns}
        data = [_c(have[c.lower()]).alias(c) if c.lower() in have else F.lit(None).alias(c) for c in columns]
        return frame.select(*data, _c("sys_from").cast("bigint").alias("sys_from"),
                            sys_to.cast("bigint").alias("sys_to"), sys_op.cast("int").alias("sys_op"))

    parts = []
    if form.needs_current():
        current = form.current_where() if current_filter is None else f"({form.current_where()}) AND ({current_filter})"
        parts.append(project(spark.table(snapshot).where(current), F.lit(None), F.lit(0)))
    closed = history_ident(layout, source, table)
    if table_exists(spark, closed):
        rows = spark.table(closed).where(f"{history_where(form)} AND delta_num <= {int(last)}")
        parts.append(project(rows, _c("sys_to"), _c("sys_op")))
    if not parts:
        return spark.createDataFrame([], f"{', '.join(f'`{c}` string' for c in columns)}, "
                                         f"sys_from bigint, sys_to bigint, sys_op int")
    return reduce(lambda a, b: a.unionByName(b), parts)

