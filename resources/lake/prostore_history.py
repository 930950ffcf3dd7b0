"""A Prostore table's closed row versions: the history table beside its snapshot table.

What flows through: before a delta's (or a fold's) MERGE, the versions it closes, read from the
snapshot table as it still is and from the run's changes, go to `lake.<dm>_history.<t>`; the
MERGE then writes the new current versions, each stamped with `sys_from` (the delta that wrote
it) and `sys_from_date` (that delta's close time). The columns and the query forms are in
`resources/lake/history_forms.py`; the reasons in docs/design-history-and-growth.md.

A version closed by delta N is in the history table's rows `delta_num = N` (partitioned in
spans of deltas: resources/lake/history_layout.py), with
`sys_to = N - 1` and `sys_op = 1` when N deleted the key, else 0 (Prostore's own stamps). Inside a
fold over deltas a..b, a key changed in several of them closes the version of each change but the
last at its next change (`LEAD` over the increments, the rows the fold already reads).

Guarantees:
- written before the MERGE, in one commit that replaces the rows of its deltas (and of any later
  one: a crashed run's, never applied), from a
  pre-state the MERGE has not touched yet: a re-run after a crash between the two commits writes
  the same rows again; a delta applied already is never re-applied, so its history stays;
- until its MERGE commits, a delta's history partition may exist with the snapshot still before
  it: readers bound the history by the snapshot's last applied delta (`read_versions`);
- O(delta) rows written: the changed keys' versions, never the table;
- a table's first delta, in the step that makes the table, closes no version: nothing is
  written (a commit of no row), and the history table is made empty, so that every reader, and
  another engine's SQL naming it, finds it (`prostore_snapshot._apply_delta`).
Schema: the history table has the snapshot table's columns (it follows its evolution: a dropped
column stays, holding each version's value as it was when the version closed; a renamed column's
versions closed before the rename hold the value under the old name) plus `sys_to`, `sys_op`,
`sys_close_date` and `delta_num`.
"""

from __future__ import annotations

from collections.abc import Sequence

from resources.failpoints import failpoint
from resources.lake.history_forms import HISTORY_FROM_PROPERTY
from resources.lake.history_layout import METRICS, ensure_layout, history_partition
from resources.lake.layout import LakeLayout
from resources.lake.prostore import _c
from resources.spark.iceberg import ensure_table, replace_deltas

# The history table's properties at creation (partitioned by delta_num, the delta that closed
# the version, sys_to + 1, in spans of deltas: resources/lake/history_layout.py).
HISTORY_PROPERTIES = {"format-version": "2", **METRICS}


def snapshot_properties(keep_history: bool) -> dict[str, str]:
    """A new snapshot table's properties: its history, when kept, is complete from its birth."""
    from resources.lake.source_tables import SNAPSHOT_TABLE_PROPERTIES

    return {**SNAPSHOT_TABLE_PROPERTIES, **({HISTORY_FROM_PROPERTY: "0"} if keep_history else {})}


def mark_history_start(spark, ident: str, delta_num: int, keep_history: bool) -> None:
    """Record on the snapshot table `ident` the first delta whose closed versions its history
    holds (`HISTORY_FROM_PROPERTY`): set when history starts (a new table, a lake from before
    history, history turned back on), removed when it is turned off, so a reader knows which
    deltas the history answers exactly (`history_start`) and uses the tags for the others. A
    table created with `snapshot_properties` needs no mark. Once seen set, a table's mark is not
    asked again in this process (a round trip per table and delta saved)."""
    if keep_history and ident in _marked:
        return
    start = history_start(spark, ident)
    quoted = ".".join(f"`{p}`" for p in ident.split("."))
    if keep_history and start is None:
        spark.sql(f"ALTER TABLE {quoted} SET TBLPROPERTIES ('{HISTORY_FROM_PROPERTY}'='{int(delta_num)}')")
    elif not keep_history and start is not None:
        spark.sql(f"ALTER TABLE {quoted} UNSET TBLPROPERTIES IF EXISTS ('{HISTORY_FROM_PROPERTY}')")
    if keep_history:
        _marked.add(ident)
    else:
        _marked.discard(ident)


_marked: set[str] = set()  # snapshot tables whose history mark this process has seen set


def history_start(spark, ident: str) -> int | None:
    """The first delta whose closed versions the history of snapshot table `ident` holds, or None."""
    quoted = ".".join(f"`{p}`" for p in ident.split("."))
    rows = spark.sql(f"SHOW TBLPROPERTIES {quoted} ('{HISTORY_FROM_PROPERTY}')").collect()
    value = rows[0][1] if rows else None
    return int(value) if value is not None and str(value).lstrip("-").isdigit() else None


def history_ident(layout: LakeLayout, datamart: str, table: str) -> str:
    return f"{layout.catalog}.{datamart}_history.{table}"


def version_fields():
    from pyspark.sql.types import LongType, TimestampNTZType

    return [("sys_from", LongType()), ("sys_from_date", TimestampNTZType())]


def stamped(changes, *, delta_column: str = "delta_num", date_column: str = "delta_date"):
    """A run's changes (increment rows, with their delta and its close time) with the columns the
    snapshot table keeps for each current version."""
    return changes.withColumn("sys_from", _c(delta_column).cast("bigint")).withColumn(
        "sys_from_date", _c(date_column))


# Up to this many changes, the changed keys go to every task that scans the table (broadcast).
BROADCAST_ROWS = 1_000_000


def closed_versions(table, changes, keys: Sequence[str], *, columns: Sequence[str], fold: bool = True,
                    rows: int | None = None, key_filter: str | None = None):
    """The versions that `changes` close, as history rows.

    `table`: the snapshot table before the run's MERGE (a DataFrame with the table's columns,
    `sys_from` and `sys_from_date` among them). `changes`: the run's changes, one per key and
    delta (exact copies allowed), with the table's columns (stamped: `stamped`), `sys_op`,
    `delta_num` and `delta_date`. `columns`: the table's. `fold`: the changes span several
    deltas (one delta closes only versions from before it). Returns the table's columns plus
    `sys_to`, `sys_op`, `sys_close_date`, `delta_num` (the closing delta).

    `rows`: how many changes there are, when known: up to `BROADCAST_ROWS` the changed keys are
    broadcast to the scan of the table (they are the delta's, the table is the lake's: no
    shuffle of the table). `key_filter`: SQL text on alias `t` keeping only the changes' keys
    (`iceberg_merge.narrow_to_changed_keys`), pushed into the table's scan so that Iceberg skips
    the files and row groups whose key range holds none of them (a short list only: it prunes
    nothing past `merge_keys.PRUNING_KEYS` keys)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cols = list(columns)
    is_delete = F.coalesce(_c("sys_op"), F.lit(0)) == 1
    # The version current before the run ends at each key's first change in it.
    first = (changes.groupBy(*[_c(k) for k in keys])
             .agg(F.min_by(F.struct(_c("delta_num").alias("n"), is_delete.alias("d"), _c("delta_date").alias("t")),
                           _c("delta_num")).alias("_first")))
    small = rows is not None and rows <= BROADCAST_ROWS
    if key_filter:
        table = table.alias("t").where(F.expr(key_filter))
    before = table.join(F.broadcast(first) if small else first, on=list(keys), how="inner").select(
        *[_c(c) for c in cols],
        (F.col("_first.n") - 1).alias("sys_to"),
        F.col("_first.d").cast("int").alias("sys_op"),
        F.col("_first.t").alias("sys_close_date"),
        F.col("_first.n").alias("delta_num"))
    if not fold:
        return before
    # Inside a fold: each written version but the key's last ends at the key's next change.
    order = Window.partitionBy(*[_c(k) for k in keys]).orderBy(_c("delta_num"))
    following = (changes.dropDuplicates()
                 .withColumn("_next", F.lead(_c("delta_num")).over(order))
                 .withColumn("_next_delete", F.lead(is_delete).over(order))
                 .withColumn("_next_date", F.lead(_c("delta_date")).over(order)))
    inside = following.where(F.col("_next").isNotNull() & ~is_delete).select(
        *[_c(c) for c in cols],
        (F.col("_next") - 1).alias("sys_to"),
        F.col("_next_delete").cast("int").alias("sys_op"),
        F.col("_next_date").alias("sys_close_date"),
        F.col("_next").alias("delta_num"))
    return before.unionByName(inside)


def write_closed_versions(spark, layout: LakeLayout, datamart: str, table_name: str, table, schema, changes,
                          keys: Sequence[str], deltas: Sequence[int], *, rows: int | None = None,
                          key_filter: str | None = None) -> str:
    """Replace the history rows of `deltas` with the versions they close (one commit).
    `schema`: the snapshot table's (`table.schema`, which the caller has); `key_filter`: as
    `closed_versions` takes it."""
    closed = closed_versions(table, changes, keys, columns=[f.name for f in schema.fields], fold=len(deltas) > 1,
                             rows=rows, key_filter=key_filter)
    return write_history(spark, layout, datamart, table_name, schema, closed, deltas)


def all_closed(table, schema, delta_num: int, close_date):
    """Every current version of `table`, closed as deleted by delta `delta_num` (a DROP TABLE then
    CREATE TABLE of the same name in that delta). `close_date`: a Column, the delta's close time."""
    from pyspark.sql import functions as F

    return table.select(*[_c(f.name) for f in schema.fields], F.lit(delta_num - 1).cast("bigint").alias("sys_to"),
                        F.lit(1).cast("int").alias("sys_op"), close_date.alias("sys_close_date"),
                        F.lit(delta_num).cast("bigint").alias("delta_num"))


def ensure_history_table(spark, layout: LakeLayout, datamart: str, table_name: str, schema) -> str:
    """Create the history table of a snapshot table of `schema`, or evolve it to its columns; its name."""
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType, TimestampNTZType

    ident = history_ident(layout, datamart, table_name)
    schema = StructType([*schema.fields, *[StructField(name, kind, True) for name, kind in (
        ("sys_to", LongType()), ("sys_op", IntegerType()), ("sys_close_date", TimestampNTZType()),
        ("delta_num", LongType()))]])
    if not ensure_table(spark, ident, schema, partition_by=[history_partition(layout.history_span)],
                        properties=HISTORY_PROPERTIES).created:
        ensure_layout(spark, ident, layout.history_span)
    return ident


def write_history(spark, layout: LakeLayout, datamart: str, table_name: str, schema, rows,
                  deltas: Sequence[int]) -> str:
    """`rows` (history rows of the snapshot table's columns, `schema`) replace the history
    rows of `deltas`."""
    ident = ensure_history_table(spark, layout, datamart, table_name, schema)
    # Later deltas' rows too: none is applied yet (a crashed run's), and a span's files hold several.
    commit = replace_deltas(spark, ident, rows, deltas, and_later=True)
    failpoint("history.written")
    return commit
