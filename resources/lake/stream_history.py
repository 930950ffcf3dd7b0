"""A change stream's closed row versions: the history table beside its snapshot table, as a
datamart has (resources/lake/prostore_history.py: the same tables, columns and read path).

What flows through: before a delta's (or a fold's) MERGE (resources/lake/cdc.py `_apply`), the
versions it closes, computed from the snapshot table as it still is and from the run's changes
by the order rules of `resources/lake/cdc_fold.py`, replace the run's rows of
`lake.<src>_history.<t>`; the MERGE then stamps each row it writes with `sys_from` (the newest
delta that applied a change to the key) and `sys_from_date` (that delta's close time).

A version is a live row (not a tombstone). Delta N closes a key's version when at least one of
its changes of the key is applied (not a duplicate, a before-image or late: the order rules),
with `sys_to = N - 1` and `sys_op = 1` when N leaves the key a tombstone, else 0; so one version
per key and sealed delta. A change that writes the same values still starts a version, as every
upsert of a Prostore increment does. Tombstones are never versions: they stay out of the history
and out of every read of it (`LIVE`).

Inside a fold over deltas a..b the versions between are exact: each delta's own fold per key
(`fold_changes(per_delta=True)`, the late rule already looks at the deltas before) is applied in
turn to the key's row before the fold, column by column as the MERGE applies it (a column no
change of the delta captured keeps the value before, or NULL after a delete or on a tombstone),
and each state but the key's last closes at the next delta that changed the key.

Guarantees: those of the datamart's history (written before the MERGE in one commit replacing
the run's deltas, readers bounded by the snapshot's last applied delta); O(run) rows written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from resources.codecs.cdc import DELETE
from resources.lake.cdc_fold import broadcast_up_to, fold_changes, rows_of_keys
from resources.lake.history_forms import LIVE
from resources.lake.layout import LakeLayout
from resources.lake.source_tables import SNAPSHOT_TABLE_PROPERTIES
from resources.lake.prostore_history import HISTORY_FROM_PROPERTY, write_history
from resources.spark.iceberg import _col as _q

# What the MERGE sets on every row it writes (`s`: the fold, `fold_changes`).
VERSION_SET = ("t.sys_from = s.__dp_from", "t.sys_from_date = s.__dp_from_date")
VERSION_VALUES = (("sys_from", "s.__dp_from"), ("sys_from_date", "s.__dp_from_date"))
_SYSTEM = ("_order", "_tombstone", "_event_time_us", "sys_from", "sys_from_date")


def stream_table_properties(keep_history: bool, first: int) -> dict[str, str]:
    """A new stream snapshot table's properties: merge-on-read, as a datamart's snapshot (a MERGE
    writes the changed rows and a delete file instead of rewriting every data file holding a
    changed key: with a delta's keys spread over the table, copy-on-write rewrote all of it,
    bench/size_stream_bench.py); its history, when kept, is complete from its first delta, `first`
    (so every delta from the mark to the last applied is one the table records, tag or no tag:
    `cdc_read.cdc_recorded_deltas`)."""
    mark = {HISTORY_FROM_PROPERTY: str(int(first))} if keep_history else {}
    return {**SNAPSHOT_TABLE_PROPERTIES, **mark}


def _same_key(keys: Sequence[str], left: Mapping[str, str], right: Mapping[str, str]):
    """Null-safe equality of the key columns (DataWorks keys a table without a primary key by
    the whole row, NULLs included); `left`/`right`: {key: column name on that side}."""
    from pyspark.sql import functions as F

    cond = None
    for k in keys:
        c = F.col(left[k]).eqNullSafe(F.col(right[k]))
        cond = c if cond is None else cond & c
    return cond


def closed_by_delta(target, folded, keys: Sequence[str], delta_num: int, *, rows: int | None = None):
    """The versions delta `delta_num` closes (one delta: its fold per key, `folded`, is the
    delta's own): the live rows of `target` (the snapshot before the MERGE) whose key it
    changes, as history rows. `rows`: how many rows `folded` has, when known (broadcast_up_to)."""
    from pyspark.sql import functions as F

    s = folded.select(*[F.col(_q(k)).alias(f"__dp_k{i}") for i, k in enumerate(keys)],
                      F.col("_op").alias("__dp_op"), F.col("__dp_from_date").alias("__dp_close"))
    cond = _same_key(keys, {k: _q(k) for k in keys}, {k: f"__dp_k{i}" for i, k in enumerate(keys)})
    live = target.join(broadcast_up_to(s, rows), cond, "inner").where(LIVE)
    return live.select(*[F.col(_q(c)) for c in target.columns], F.lit(delta_num - 1).cast("bigint").alias("sys_to"),
                       (F.col("__dp_op") == DELETE).cast("int").alias("sys_op"),
                       F.col("__dp_close").alias("sys_close_date"), F.lit(delta_num).cast("bigint").alias("delta_num"))


def closed_in_fold(changes, target, keys: Sequence[str], *, rows: int | None = None):
    """The versions a fold's deltas close (module docstring): `changes`, the increment rows of the
    deltas; `target`, the snapshot before the fold (with `sys_from`, `sys_from_date`). `rows`: how
    many rows `changes` has, when known (broadcast_up_to)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    types = {f.name: f.dataType for f in target.schema.fields}
    data = [c for c in target.columns if c not in _SYSTEM]
    per = fold_changes(changes, target, keys, data, types, several_deltas=True, per_delta=True, changes_rows=rows)
    # Only the stored rows of the changes' keys go on (a left join cannot broadcast its right side).
    target = rows_of_keys(changes, target, keys, changes_rows=rows)
    base = target.select(*[F.col(_q(c)).alias(f"__dp_b{i}") for i, c in enumerate(data)],
                         *[F.col(c).alias(f"__dp_b{c}") for c in _SYSTEM], F.lit(True).alias("__dp_b_in"))
    j = per.join(base, _same_key(keys, {k: _q(k) for k in keys}, {k: f"__dp_b{data.index(k)}" for k in keys}), "left")
    by_key = Window.partitionBy(*[F.col(_q(k)) for k in keys]).orderBy("__dp_from")
    deleted = F.col("_op") == DELETE
    # Whether the key had no live row before the delta (absent, a tombstone, or deleted by the
    # key's previous delta in the fold): a column the delta does not capture then reads NULL.
    was_empty = ~F.coalesce(F.col("__dp_b_in"), F.lit(False)) | F.coalesce(F.col("__dp_b_tombstone"), F.lit(False))
    j = j.withColumn("__dp_empty", F.coalesce(F.lag(deleted).over(by_key), was_empty)) \
         .withColumn("__dp_first", F.row_number().over(by_key) == 1)
    upto = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    states = []
    for i, c in enumerate(data):
        if c in keys:
            states.append(F.col(_q(c)).alias(c))
            continue
        # The value comes from the key's newest delta up to this one that set it: captured it, or
        # emptied the row (a delete inside the delta, or no live row before it); else from before the fold.
        captured = F.col(f"__dp_c{i}")
        stop = captured | F.col("__dp_reset") | F.col("__dp_empty")
        set_by = F.last(F.when(stop, F.struct(F.when(captured, F.col(f"__dp_v{i}")).alias("v"))),
                        ignorenulls=True).over(upto)
        states.append(F.when(deleted, F.lit(None).cast(types[c])).when(set_by.isNull(), F.col(f"__dp_b{i}"))
                      .otherwise(set_by.getField("v")).alias(c))
    after = j.select(*states, F.col("_order"), deleted.alias("_tombstone"), F.col("_event_time_us"),
                     F.col("__dp_from").cast("bigint").alias("sys_from"), F.col("__dp_from_date").alias("sys_from_date"),
                     F.col("__dp_from").cast("bigint").alias("__dp_pos"))
    before = j.where(F.col("__dp_first") & F.col("__dp_b_in").isNotNull()).select(
        *[F.col(f"__dp_b{i}").alias(c) for i, c in enumerate(data)],
        *[F.col(f"__dp_b{c}").alias(c) for c in _SYSTEM], F.lit(-1).cast("bigint").alias("__dp_pos"))
    seq = Window.partitionBy(*[F.col(_q(k)) for k in keys]).orderBy("__dp_pos")
    versions = (after.unionByName(before)
                .withColumn("__dp_next", F.lead("__dp_pos").over(seq))
                .withColumn("__dp_next_deleted", F.lead("_tombstone").over(seq))
                .withColumn("__dp_next_date", F.lead("sys_from_date").over(seq)))
    return versions.where(F.col("__dp_next").isNotNull() & F.expr(f"({LIVE})")).select(
        *[F.col(_q(c)) for c in target.columns], (F.col("__dp_next") - 1).alias("sys_to"),
        F.col("__dp_next_deleted").cast("int").alias("sys_op"), F.col("__dp_next_date").alias("sys_close_date"),
        F.col("__dp_next").alias("delta_num"))


def write_stream_history(spark, layout: LakeLayout, source: str, table: str, target, keys: Sequence[str],
                         deltas: Sequence[int], *, folded, changes, folded_rows: int | None = None,
                         changes_rows: int | None = None) -> str:
    """Replace the history rows of `deltas` with the versions they close, in one commit:
    one delta's from its fold (`folded`, per key), several from their `changes` (`closed_in_fold`).
    `target`: the snapshot table before the MERGE. `folded_rows`, `changes_rows`: how many rows
    `folded` and `changes` have, when known."""
    rows = (closed_by_delta(target, folded, keys, deltas[-1], rows=folded_rows) if len(deltas) == 1
            else closed_in_fold(changes, target, keys, rows=changes_rows))
    return write_history(spark, layout, source, table, target.schema, rows, deltas)
