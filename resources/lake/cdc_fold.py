"""The change-stream snapshot's fold, as DataFrame transforms (no Iceberg, no commit).

In: a table's changes of one delta or of consecutive deltas (increment rows: data columns,
`_op`, `_order`, `_event_id`, `_captured`, `_event_time_us`, `delta_num`) and the state they
apply to (snapshot rows: data columns, `_order`, `_tombstone`, `_event_time_us`).
Out: `fold_changes`, one row per key saying what the deltas do to it, which a MERGE applies
(resources/lake/cdc_merge.py `merge_folded`) or `merged_state` applies to a DataFrame (a reader rebuilding
the state as of a delta inside a folded commit).

The guarantee: folding deltas a..b at once gives exactly the state that applying them one
after the other gives (resources/lake/cdc.py's module docstring has the per-delta rules).
Applied one by one, a change of delta d is late, and dropped, when its `_order` is not above
the row's stored order after delta d-1; that stored order is the greatest order of the state and
of every change of the key in deltas before d (a change dropped as late never raised it), so
the fold drops a change whose order is not above both. What survives comes in the same order
delta by delta and by `_order`, so one fold by `_order` does what the deltas' folds did in turn.
Duplicates are dropped within a delta; a copy in a later delta is late by the rule above, as it
is applied one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from resources.codecs.cdc import BEFORE_IMAGE, DELETE, UPSERT
from resources.spark.iceberg import _col as _q

__all__ = ["broadcast_up_to", "fold_changes", "merged_state", "rows_of_keys", "stored_of_changes"]

# Up to this many changes, their keys go to every task that scans the stored rows (broadcast).
BROADCAST_ROWS = 1_000_000


def _same(keys: Sequence[str], left: str, right: str):
    """Key i of columns `<left>i` equal (NULL-safe) to `<right>i`, for every key."""
    from functools import reduce

    from pyspark.sql import functions as F

    return reduce(lambda a, b: a & b, [F.col(f"{left}{i}").eqNullSafe(F.col(f"{right}{i}")) for i in range(len(keys))])


def stored_of_changes(changes, target, keys: Sequence[str], *, changes_rows: int | None):
    """The rows of `target` (every column) whose key one of `changes` has, read in one scan of
    the table and kept (a local checkpoint) for the fold and the history, which both need them
    and nothing else of the table: one read of the table where each read it. None when how many
    changes there are is unknown or above `BROADCAST_ROWS` (the callers read the table then)."""
    from resources.spark.session import local_checkpoint

    if changes_rows is None or changes_rows > BROADCAST_ROWS:
        return None
    return local_checkpoint(rows_of_keys(changes, target, keys, changes_rows=changes_rows))


def rows_of_keys(changes, target, keys: Sequence[str], *, changes_rows: int | None):
    """The rows of `target` whose key one of `changes` has (a semi join; the changes' keys
    broadcast up to `BROADCAST_ROWS` changes, when the caller says how many)."""
    from pyspark.sql import functions as F

    have = {f.name: f.dataType for f in target.schema.fields}
    touched = changes.select(*[(F.col(_q(k)) if k in changes.columns else F.lit(None)).cast(have[k]).alias(f"__dp_s{i}")
                               for i, k in enumerate(keys)])
    stored = target.select("*", *[F.col(_q(k)).alias(f"__dp_t{i}") for i, k in enumerate(keys)])
    kept = stored.join(broadcast_up_to(touched, changes_rows), _same(keys, "__dp_t", "__dp_s"), "left_semi")
    return kept.drop(*[f"__dp_t{i}" for i in range(len(keys))])


def broadcast_up_to(frame, rows: int | None):
    """`frame` hinted to go to every task that scans the table, when it has at most
    `BROADCAST_ROWS` rows. Said, not left to Spark: a checkpointed frame's size is unknown to the
    planner, so it planned a sort-merge join shuffling every row of the table, every column
    (20M rows: 28 s of a 57 s delta, bench/size_stream_bench.py), and turned it into a broadcast
    only after that shuffle."""
    from pyspark.sql import functions as F

    return F.broadcast(frame) if rows is not None and rows <= BROADCAST_ROWS else frame


def fold_changes(changes, target, keys: Sequence[str], data: Sequence[str], types: Mapping[str, object], *,
                 several_deltas: bool, per_delta: bool = False, changes_rows: int | None = None):
    """Per key of `changes`: `_order` (the newest applied), `_op` (of the newest), `__dp_events`
    (changes applied), `__dp_reset` (a delete among them: columns no later change captured
    start empty), `__dp_was_tomb` (the key's stored row is a tombstone; false: a live row;
    NULL: none), `_event_time_us`, `__dp_from` and `__dp_from_date` (the newest delta with a
    change applied, and its close time: the `sys_from` of the version it writes), and per data
    column i `__dp_v<i>` (the newest captured value after the key's last delete) and `__dp_c<i>`
    (whether any such change captured it). `target`: the state the changes apply to; `types`:
    its column types. `several_deltas`: `changes` span more than one delta (the late rule then
    looks at earlier deltas too). `per_delta`: one row per key and delta instead, each delta's
    own fold (what that delta did to the key, applied one by one: resources/lake/stream_history.py).
    `changes_rows`: how many rows `changes` has, when known (their keys are then broadcast)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    have = set(changes.columns)

    def value(c):  # a snapshot column the increment lacks (never landed): NULL, never captured
        return F.col(_q(c)).cast(types[c]) if c in have else F.lit(None).cast(types[c])

    by_key = [F.col(_q(k)) for k in keys]
    changes = changes.where(F.col("_op") != BEFORE_IMAGE)
    if several_deltas:  # the newest order of the key in the deltas before each change's own
        earlier = Window.partitionBy(*by_key).orderBy("delta_num").rangeBetween(Window.unboundedPreceding, -1)
        changes = changes.withColumn("__dp_before", F.max("_order").over(earlier))
    # 1. one copy per event and delta; before-images out.
    changes = (changes.withColumn("_eid", F.coalesce(F.col("_event_id"), F.concat(F.lit("order:"), F.col("_order"))))
               .dropDuplicates(["delta_num", "_eid"]))
    # 2. changes at or below the row's stored order are late: dropped before the fold, so no
    #    column of a newer row is overwritten by an older value. (<=>: keys may hold NULLs,
    #    DataWorks keys tables without a primary key by the whole row.)
    # Only the stored rows of the changes' keys (`rows_of_keys`: a semi join with the changes'
    # keys broadcast, so each task drops other keys' rows as it scans); the left join below then
    # shuffles O(changes) rows, not the table (a left join cannot broadcast its left side, the
    # changes: it shuffled every stored row).
    stored = rows_of_keys(changes, target, keys, changes_rows=changes_rows).select(
        *[F.col(_q(k)).alias(f"__dp_t{i}") for i, k in enumerate(keys)], F.col("_order").alias("__dp_t_order"),
        (F.col("_tombstone") if "_tombstone" in target.columns else F.lit(None).cast("boolean")).alias("__dp_was_tomb"))
    cond = None
    for i, k in enumerate(keys):
        c = value(k).eqNullSafe(F.col(f"__dp_t{i}"))
        cond = c if cond is None else cond & c
    fresh = changes.join(stored, cond, "left").where(
        F.col("__dp_t_order").isNull() | (F.col("_order") > F.col("__dp_t_order")))
    if several_deltas:
        fresh = fresh.where(F.col("__dp_before").isNull() | (F.col("_order") > F.col("__dp_before")))
    fresh = fresh.select(*[value(k).alias(k) for k in keys], *[value(c).alias(f"__dp_v{i}") for i, c in enumerate(data)],
                         "_op", "_order", "_captured", "_event_time_us", "__dp_was_tomb",
                         *[c for c in ("delta_num", "delta_date") if c in have])
    # 3. fold per key: the last change decides the op; after the key's last delete each column
    #    takes its latest captured value (max_by ignores rows whose order is NULL).
    group = [*by_key, *([F.col("delta_num")] if per_delta else [])]
    key_window = Window.partitionBy(*group)
    fresh = fresh.withColumn("__dp_last_delete", F.max(F.when(F.col("_op") == DELETE, F.col("_order"))).over(key_window))
    live = (F.col("_op") == UPSERT) & (F.col("__dp_last_delete").isNull()
                                       | (F.col("_order") > F.col("__dp_last_delete")))
    aggs = [F.max("_order").alias("_order"), F.max_by("_op", "_order").alias("_op"),
            F.count(F.lit(1)).alias("__dp_events"),
            F.max(F.col("__dp_last_delete").isNotNull()).alias("__dp_reset"),
            F.max_by("_event_time_us", "_order").alias("_event_time_us"),
            # the key's stored row before the fold: a tombstone (true), live (false), none (NULL)
            F.max("__dp_was_tomb").alias("__dp_was_tomb")]
    if "delta_num" in have:
        aggs.append(F.max("delta_num").alias("__dp_from"))
    if "delta_date" in have:
        aggs.append(F.max_by("delta_date", "delta_num").alias("__dp_from_date"))
    for i, c in enumerate(data):
        if c in keys:
            continue
        captured = live & (F.col("_captured").isNull() | F.array_contains(F.col("_captured"), c))
        aggs.append(F.max_by(F.col(f"__dp_v{i}"), F.when(captured, F.col("_order"))).alias(f"__dp_v{i}"))
        aggs.append(F.coalesce(F.max(captured), F.lit(False)).alias(f"__dp_c{i}"))
    return fresh.groupBy(*group).agg(*aggs)


def merged_state(base, folded, keys: Sequence[str], data: Sequence[str]):
    """`base` (snapshot rows) with `folded` (`fold_changes` of changes applied to it) applied as
    `merge_folded`'s MERGE applies them: a key's newer delete leaves a tombstone, a newer upsert
    sets the columns it captured (the others kept, or NULL after a delete or on a tombstone),
    a new key is inserted; rows the fold does not touch stay as they are."""
    from pyspark.sql import functions as F

    t = base.select(*[F.col(_q(c)).alias(f"__dp_t_{i}") for i, c in enumerate(data)],
                    F.col("_order").alias("__dp_t_order"), F.col("_tombstone").alias("__dp_t_tomb"),
                    F.col("_event_time_us").alias("__dp_t_time"), F.lit(True).alias("__dp_in_t"))
    s = folded.select(*[F.col(_q(k)).alias(f"__dp_s_{data.index(k)}") for k in keys],
                      *[F.col(c) for c in folded.columns if c.startswith("__dp_") or c in ("_order", "_op",
                                                                                            "_event_time_us")],
                      F.lit(True).alias("__dp_in_s"))
    cond = None
    for k in keys:
        c = F.col(f"__dp_t_{data.index(k)}").eqNullSafe(F.col(f"__dp_s_{data.index(k)}"))
        cond = c if cond is None else cond & c
    j = t.join(s, cond, "full_outer")
    in_t, in_s = F.col("__dp_in_t").isNotNull(), F.col("__dp_in_s").isNotNull()
    newer = in_t & in_s & (F.col("_order") > F.col("__dp_t_order"))
    insert = ~in_t
    deleted = F.col("_op") == DELETE

    out = []
    for i, c in enumerate(data):
        kept = F.col(f"__dp_t_{i}")
        if c in keys:
            out.append(F.when(insert, F.col(f"__dp_s_{i}")).otherwise(kept).alias(c))
            continue
        updated = (F.when(F.col(f"__dp_c{i}"), F.col(f"__dp_v{i}"))
                   .when(F.col("__dp_reset") | F.col("__dp_t_tomb"), F.lit(None)).otherwise(kept))
        out.append(F.when(insert, F.col(f"__dp_v{i}"))
                   .when(newer, F.when(deleted, F.lit(None)).otherwise(updated)).otherwise(kept).alias(c))
    out += [F.when(insert | newer, F.col("_order")).otherwise(F.col("__dp_t_order")).alias("_order"),
            F.when(insert | newer, deleted).otherwise(F.col("__dp_t_tomb")).alias("_tombstone"),
            F.when(insert | newer, F.col("_event_time_us")).otherwise(F.col("__dp_t_time")).alias("_event_time_us")]
    return j.select(*out)
