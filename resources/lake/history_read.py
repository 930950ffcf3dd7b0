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

`state_as_of` is the Spark side's one reader of "table T as of delta N" (datamarts and change
streams alike): it gathers the facts `resources/lake/as_of.py` decides on (L, the source's landed
delta: `LakeMark`, read once per source by callers that read several tables; R and the tags: one
query; the history's start and the folds only where the rules get to them) and reads the state
the rules choose. A delta above L raises `DeltaNotLandedError` (a `DeltaportError`: the CLI's
one-line error).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce

from resources.lake.as_of import Absent, Current, FromFold, FromHistory, FromTag, resolve_as_of, source_landed
from resources.lake.history_forms import AsOfDelta, Form, check_covered, history_where
from resources.lake.landed_mark import lake_landed_through
from resources.lake.layout import LakeLayout
from resources.lake.prostore import _c
from resources.lake.prostore_history import history_ident, history_start
from resources.spark.iceberg import TableNotFoundError, table_exists
from resources.spark.iceberg_reads import folded_commits, inside_fold, last_applied_deltas, tagged_state


@dataclass(frozen=True)
class LakeMark:
    """A source's lake mark as one read found it (`landed_mark.lake_landed_through`); `value`
    None: a lake written before the mark, whose tables each answer L by their own newest delta."""
    value: int | None

    def landed(self, recorded: int | None) -> int | None:
        """L for a table whose newest recorded delta is `recorded` (R)."""
        return source_landed(self.value, recorded)


def read_mark(spark, layout: LakeLayout, source: str) -> LakeMark:
    """The source's lake mark, read now: a read of several tables reads it once and passes it on."""
    return LakeMark(lake_landed_through(spark, layout, source))


class _Folds:
    """A table's folded commits, read the first time the rules iterate them (rule 6 only: most
    reads are answered before, and the read is a scan of the table's snapshots)."""

    def __init__(self, spark, ident: str):
        self.spark, self.ident, self._commits = spark, ident, None

    def commits(self):
        if self._commits is None:
            self._commits = folded_commits(self.spark, self.ident)
        return self._commits

    def __iter__(self):
        return iter([c.deltas for c in self.commits()])


def state_as_of(spark, layout: LakeLayout, source: str, table: str, delta_num: int, *,
                current_filter: str | None = None, last: int | None = None, mark: LakeMark | None = None):
    """The snapshot table's rows as of `delta_num` (every column it has), as `as_of.resolve_as_of`
    chooses: the table as it is (no delta after N changed it), the versions current at N from the
    table and its history, the snapshot of its newest tag at or below N, an `InsideFold` for the
    caller to rebuild (N inside a folded commit), or no rows (the table had none at N: its current
    columns, empty). Raises `DeltaNotLandedError` for N above the source's landed delta.

    `current_filter`: as `versions_frame` takes it. `last`: the table's newest recorded delta (R),
    when the caller has just read it: an N at or above it that has landed is the table as it is,
    with no metadata read again. `mark`: the source's lake mark, when the caller has read it."""
    ident = layout.snapshot(source, table)
    mark = read_mark(spark, layout, source) if mark is None else mark
    landed = mark.landed(last)
    if last is not None and landed is not None and last <= delta_num <= landed:
        return spark.table(ident)  # rule 3, from what the caller knows
    tags: dict[str, dict[int, int]] = {}
    found = last_applied_deltas(spark, [ident], tags=tags)
    if ident not in found:
        raise TableNotFoundError(f"Iceberg table {ident} does not exist")
    recorded = found[ident]
    landed = mark.landed(recorded)
    # The history's start matters only for a delta the table changed after (rule 4).
    start = history_start(spark, ident) if recorded is not None and recorded > delta_num and \
        landed is not None and delta_num <= landed else None
    folds = _Folds(spark, ident)
    how = resolve_as_of(delta_num, landed=landed, recorded=recorded, tags=tags[ident], folds=folds,
                        history_from=start, name=f"{source}.{table}")
    if isinstance(how, Current):
        return spark.table(ident)
    if isinstance(how, FromHistory):
        columns = [f.name for f in spark.table(ident).schema.fields if f.name != "sys_from"]
        return versions_frame(spark, layout, source, table, AsOfDelta(delta_num), columns, last=how.recorded,
                              start=start, current_filter=current_filter).drop("sys_to", "sys_op")
    if isinstance(how, FromTag):
        return tagged_state(spark, ident, how.snapshot_id)
    if isinstance(how, FromFold):
        fold = [c for c in folds.commits() if c.deltas == how.deltas][-1]
        return inside_fold(spark, ident, fold, tags[ident])
    assert isinstance(how, Absent), how
    return spark.table(ident).limit(0)


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

