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
import json
from dataclasses import dataclass
from functools import reduce

from resources.spark.unions import union_all


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


@dataclass(frozen=True)
class KeyCheckPlan:
    """What a delta run's key check looks at: the keys of `deltas`' increments, or `every_key`
    of the tables; neither: no check in this run (its row counts come from commit summaries)."""

    deltas: tuple[int, ...] | None = None
    every_key: bool = False
    next_due: int | None = None  # the delta whose run checks next (when this one does not)

    @classmethod
    def for_run(cls, run: Sequence[int], *, every: int, every_key: bool = False,
                asked: bool = False) -> KeyCheckPlan:
        """`every_key`: the run maintains its tables (every key checked then); `asked`: the
        snapshot was asked for alone (an operator's run), which checks the run's deltas at least."""
        deltas = key_check_deltas(run, every)
        if deltas is None and asked:
            deltas = list(run)
        return cls(None if every_key or deltas is None else tuple(deltas), every_key,
                   _multiple_from(max(run) + 1, every) if run else None)


def _period(every: int) -> int:
    """`lake.key_check_every_deltas` as a period of deltas: below 1 is 1 (a check in every run)."""
    return max(1, int(every))


def _multiple_from(delta: int, every: int) -> int:
    """The lowest multiple of the period `every` at or after `delta`."""
    every = _period(every)
    return -(-delta // every) * every


def key_check_deltas(run: Sequence[int], every: int) -> list[int] | None:
    """The deltas whose keys a run of deltas `run` (consecutive) checks, or None: a run that
    crosses a multiple m*every of `every` checks every delta from (m-1)*every to its last
    (m*every: the lowest such multiple; delta 0 counts as one). The runs that cross no multiple
    check nothing: a MERGE whose source holds each key once (merge_upserts checks that in its
    own job) onto a table whose keys are unique leaves them unique, so the check is a guard
    against what no run should do, and one run in `every` pays its scan of the key columns.
    The deltas checked reach back past the run's first, so every delta is covered by some
    check, whatever the runs' ranges: a range that starts after a multiple, or a run that failed
    before its check and lands again later (it checks again)."""
    if not run:
        return None
    every = _period(every)
    first, last = min(run), max(run)
    multiple = _multiple_from(first, every)
    if multiple > last:
        return None
    return list(range(max(0, multiple - every), last + 1))


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


# At most this many of a table's duplicated keys are named in the check's result.
NAMED_KEYS = 10


def key_check(frames: Sequence[KeyCheckInput], *, named: dict[str, list[str]] | None = None,
              ) -> tuple[dict[str, int], dict[str, int]]:
    """({table: rows}, {table: touched keys held by more than one row}, only tables with some),
    for every table at once, in one Spark job. `named`: filled with {table: up to `NAMED_KEYS`
    of those keys, as `k=v, ...` text}, so that a failed check says which rows to look at."""
    counts = {f.name: 0 for f in frames}  # an empty table has no group below
    duplicated = {}
    for r in (key_check_frame(frames).collect() if frames else []):
        counts[r["t"]] = int(r["rows"] or 0)
        if r["dups"]:
            duplicated[r["t"]] = int(r["dups"])
            if named is not None:
                named[r["t"]] = [", ".join(f"{k}={v!r}" for k, v in json.loads(key).items()) for key in r["named"]]
    return counts, duplicated


def key_check_frame(frames: Sequence[KeyCheckInput]):
    """`key_check`'s job, as a DataFrame of (t, rows, dups, named): one row per table with rows."""
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
        dup = F.col("_deltaport_key").isNotNull() & (F.col("n") > 1)
        # A duplicated key as JSON text: the tables' key types differ, and only those few are built.
        per_table.append(per_key.select(F.lit(f.name).alias("t"), "n", "live", dup.alias("dup"),
                                        F.when(dup, F.to_json("_deltaport_key")).alias("key")))
    union = union_all(per_table, by_name=True)
    named = F.slice(F.collect_list("key"), 1, NAMED_KEYS)  # collect_list skips the NULLs
    return union.groupBy("t").agg(F.sum("live").alias("rows"), F.count(F.when(F.col("dup"), 1)).alias("dups"),
                                  named.alias("named"))


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
