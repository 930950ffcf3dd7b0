"""The key check and row counts of state tables, in O(delta) shuffled rows whatever the table's size.

What flows through: per table, its rows (the key columns only) and the keys a run's changes
touched; out come the table's rows and the number of touched keys that more than one row holds.

Why checking only the touched keys is exact: a table whose keys were unique before a run can
only hold a key twice afterwards at a key the run wrote (rows the run did not write are the rows
that were there, unique). Each run's keys are checked, so by induction the whole table is.

Cost: one scan of the key columns of each table, joined with the touched keys (broadcast up to
`BROADCAST_KEYS`), then one hash aggregation whose groups are the touched keys plus one group
for every other row: the partial aggregation folds the untouched rows into one row per task, so
what is shuffled is O(touched keys), not O(table) as a group-by of every key was (measured on 4M
rows: that group-by took 14 s of a 27 s delta, bench/size_bench.py). The count is a count of
the rows the scan read, deletes applied: exact, whatever delete files the table holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce

# Up to this many touched keys, they go to every task that scans the table (broadcast).
BROADCAST_KEYS = 1_000_000


@dataclass(frozen=True)
class KeyCheckInput:
    name: str  # the table's name in the result
    rows: object  # DataFrame: the table's rows (deletes applied), with the key columns
    touched: object | None  # DataFrame: the keys to check (the key columns among others); None: every key
    keys: Sequence[str]
    touched_rows: int | None = None  # how many rows `touched` has, when known (for the broadcast)
    null_safe: bool = False  # NULL is a key value like any other (a change stream's keys: `<=>`)
    live: object | None = None  # Column: 1 for a row to count, 0 for one not to (default: every row counts)


def commit_deltas(spark, ident: str, n: int) -> list[int]:
    """The deltas that the commit of state table `ident` recording delta `n` applied: [n], or a
    fold's range. [n] when no commit records n (a delta that changed nothing in the table: its
    tag points at an older commit, and its increment holds no row of the table)."""
    from pyspark.sql import functions as F

    from resources.spark.iceberg import DELTA_PROPERTY, DELTAS_PROPERTY, metadata_table
    from resources.spark.iceberg_reads import _ranges_parse

    row = (metadata_table(spark, ident, "snapshots").where(F.col("summary")[DELTA_PROPERTY] == str(int(n)))
           .orderBy(F.col("committed_at").desc()).select(F.col("summary")[DELTAS_PROPERTY].alias("deltas")).first())
    return _ranges_parse(row["deltas"]) if row is not None and row["deltas"] else [int(n)]


def key_check(frames: Sequence[KeyCheckInput]) -> tuple[dict[str, int], dict[str, int]]:
    """({table: rows}, {table: touched keys held by more than one row}, only tables with some),
    for every table at once, in one Spark job."""
    counts = {f.name: 0 for f in frames}  # an empty table has no group below
    duplicated = {}
    for r in (key_check_frame(frames).collect() if frames else []):
        counts[r["t"]] = int(r["rows"] or 0)
        if r["dups"]:
            duplicated[r["t"]] = int(r["dups"])
    return counts, duplicated


def key_check_frame(frames: Sequence[KeyCheckInput]):
    """`key_check`'s job, as a DataFrame of (t, rows, dups): one row per table with rows."""
    from pyspark.sql import functions as F

    per_table = []
    for f in frames:
        cols = [F.col(f"`{k}`") for k in f.keys]
        rows = f.rows.select(*cols, (F.lit(1) if f.live is None else f.live).alias("_deltaport_live"))
        if f.touched is None:  # every key is a group of its own: O(table) shuffled
            keyed, hit = rows, F.lit(True)
        else:
            keyed, hit = _touched_only(f, rows), F.col("_deltaport_hit")
        # Every untouched row falls in the one group NULL: the partial aggregation of each task
        # folds them into a single row before the shuffle. (A NULL key is inside the struct, so
        # it is a group of its own.)
        group = F.when(hit, F.struct(*[F.col(f"`{k}`") for k in f.keys]))
        per_key = keyed.groupBy(group.alias("_deltaport_key")).agg(F.count(F.lit(1)).alias("n"),
                                                                    F.sum("_deltaport_live").alias("live"))
        per_table.append(per_key.select(F.lit(f.name).alias("t"), "n", "live",
                                        (F.col("_deltaport_key").isNotNull() & (F.col("n") > 1)).alias("dup")))
    union = reduce(lambda a, b: a.unionByName(b), per_table)
    return union.groupBy("t").agg(F.sum("live").alias("rows"), F.count(F.when(F.col("dup"), 1)).alias("dups"))


def _touched_only(f: KeyCheckInput, rows):
    """`rows` with `_deltaport_hit` true where the row's key is one of `f.touched`'s (NULL else)."""
    from pyspark.sql import functions as F

    hits = (f.touched.select(*[F.col(f"`{k}`").alias(f"_deltaport_k{i}") for i, k in enumerate(f.keys)])
            .distinct().withColumn("_deltaport_hit", F.lit(True)))
    small = f.touched_rows is None or f.touched_rows <= BROADCAST_KEYS
    same = [(F.col(f"`{k}`").eqNullSafe(F.col(f"_deltaport_k{i}")) if f.null_safe
             else F.col(f"`{k}`") == F.col(f"_deltaport_k{i}")) for i, k in enumerate(f.keys)]
    joined = rows.join(F.broadcast(hits) if small else hits, on=reduce(lambda a, b: a & b, same), how="left")
    return joined.drop(*[f"_deltaport_k{i}" for i in range(len(f.keys))])
