"""The MERGE's target side narrowed to the keys of the changes, before the join's shuffle, when
the target is big enough for that to pay.

What flows through: a delta's changes and an estimate of the target's rows in; out, a predicate
on the target's key columns (``t.id IN (5L, ...)``) that `merge_upserts` adds to its ON
condition, or None.

Why: a MERGE with a WHEN NOT MATCHED clause joins target RIGHT OUTER source (the source's rows
are kept), which a broadcast of the source cannot do, so Spark plans a sort-merge join that
shuffled every row of the target (measured on 4M rows, bench/size_bench.py). Spark's runtime
bloom filter does not step in (the source's filter on its delta is pushed into the Iceberg scan,
so it sees no selective filter). A predicate in the ON condition that names only the target is
pushed below the join by the optimizer: each task then drops the rows of other keys as it scans
(a hash set lookup), and what is shuffled is O(delta). The table is still read (its key column
and row positions only): keys of a delta are spread over every file.

When not: the list costs the server O(keys) to parse, analyse and optimise, and every target row
a lookup; it saves the shuffle of the target's other rows. On a target that is not far bigger
than the changes it costs more than it saves (MERGEs of 10k keys on a loaded 2-core server: into
100k rows, 8.5-11.2 s without the list, 12.6 s with plain literals, 17.8-39 s with the CAST text
it had before; into 500k rows, 15.9-25.9 s without, 20.5-57.5 s with plain literals; into 4M rows
the list saved most of the MERGE's 8-18 s), so it is added only when the target holds at least
`MIN_TARGET_ROWS_PER_KEY` rows per key. The estimate comes from the target's newest commit
summary (rows written minus rows deleted). When the caller knows how many changes there are
(at least as many as keys), the summary is read first, alone (a metadata read), and a target
too small for that many keys gets no list and no keys' job (the keys' distinct aggregation cost
0.5-2.9 s of a steady delta and 6-24 s of a range of 20 under load, to find that the list
would not pay); else it is read in the same job as the keys.

Exact: a target row can match a change only at one of the changes' keys, so adding "the target's
key is one of the changes' keys" to the ON condition changes no match. The list holds every key
of the changes (all of them or no filter: a key left out would turn an update into an insert).
"""

from __future__ import annotations

from collections.abc import Sequence

from resources.spark.iceberg import _col, _sql_str, metadata_table
from resources.spark.iceberg_reads import LIVE_ROWS_SQL

# Up to this many distinct keys the filter goes into the MERGE's text (a 10k-key delta: ~0.1 MB
# of SQL); above, the MERGE runs without it (a delta that big is a good part of the table anyway).
MAX_FILTER_KEYS = 50_000
# Iceberg's metrics evaluators (files by their column bounds, Parquet row groups by their
# statistics) skip nothing for an IN list longer than this (their IN_PREDICATE_LIMIT): up to it,
# the list also prunes the scan where the table's files or row groups hold narrow key ranges.
PRUNING_KEYS = 200
# The filter pays from about this many target rows per key of the changes (module docstring).
MIN_TARGET_ROWS_PER_KEY = 200
# Key types whose Spark SQL literal is exact and typed without a CAST (a suffix says the type):
# a CAST per key is what made the list's planning cost seconds.
_SUFFIX = {"tinyint": "Y", "smallint": "S", "int": "", "bigint": "L"}
# Key types (Spark's simpleString) whose values go into the list as text: those Spark casts to text
# and back exactly (decimals too, any precision); binary goes as hex; any other type, no list.
_AS_TEXT = {*_SUFFIX, "float", "double", "boolean", "date", "timestamp", "timestamp_ntz", "string"}


def target_rows(spark, ident: str):
    """A one-row DataFrame (`rows`: the target's live rows as its newest commit summary counts them,
    rows written minus rows deleted), or no row for a table without a commit. An estimate for
    `target_key_filter`'s choice, not a count: it never decides what a MERGE writes."""
    from pyspark.sql import functions as F

    return (metadata_table(spark, ident, "snapshots").orderBy(F.col("committed_at").desc()).limit(1)
            .select(F.expr(LIVE_ROWS_SQL).alias("rows")))


def target_key_filter(changes, key_columns: Sequence[str], *, alias: str = "t", limit: int = MAX_FILTER_KEYS,
                      target_size=None, min_rows_per_key: int = MIN_TARGET_ROWS_PER_KEY,
                      changes_rows: int | None = None, null_safe: bool = False) -> str | None:
    """SQL text restricting the MERGE target `alias` to the keys of `changes`, or None (more than
    `limit` keys, none, a key of a type not in `_AS_TEXT` or binary, or a target under
    `min_rows_per_key` rows per key). `target_size`: the target's live rows when the caller knows
    them (an int: no job asks), or `target_rows` of the target, collected in the keys' job, or
    first and alone when `changes_rows` (how many changes there are) is given; None: its size is
    not weighed. A target under `min_rows_per_key` rows per change (when `changes_rows` is given)
    gets None without the keys being read. `null_safe`: the MERGE matches keys with `<=>` (a change
    stream's), so a NULL key matches a NULL key; an IN list cannot say that, so a change with a
    NULL in its key means no filter.
    Integers travel as typed literals, binary as hex (`X'..'`: any bytes, UTF-8 or not), other
    values as Spark's own text of them cast back to the key's type, so every value round-trips
    exactly."""
    from pyspark.sql import functions as F

    keys = list(key_columns)
    known = target_size if isinstance(target_size, int) else None  # weighed with no job
    if known is not None:
        target_size = None
        if changes_rows is not None and known < min_rows_per_key * max(1, changes_rows):
            return None
    elif target_size is not None and changes_rows is not None:
        size = next((r["rows"] for r in target_size.collect()), None) or 0
        if size < min_rows_per_key * max(1, changes_rows):
            return None
        target_size = None  # big enough for any of the changes' keys: only the keys are needed
    types = {f.name: f.dataType for f in changes.schema.fields}
    kinds = [types[k].simpleString() for k in keys]
    if any(kind not in _AS_TEXT and kind != "binary" and not kind.startswith("decimal") for kind in kinds):
        return None
    as_text = [F.hex(F.col(_col(k))) if kind == "binary" else F.col(_col(k)).cast("string")
               for k, kind in zip(keys, kinds)]
    found = changes.select(*[c.alias(f"k{i}") for i, c in enumerate(as_text)])
    if not null_safe:  # NULL keys fail the MERGE
        found = found.where(" AND ".join(f"k{i} IS NOT NULL" for i in range(len(keys))))
    found = found.distinct().limit(limit + 1).withColumn("_rows", F.lit(None).cast("bigint"))
    if target_size is not None:  # one job: the keys and the target's size
        found = found.unionByName(target_size.select(*[F.lit(None).cast("string").alias(f"k{i}")
                                                       for i in range(len(keys))], F.col("rows").alias("_rows")))
    got = found.collect()
    rows = [r for r in got if r["_rows"] is None]
    size = known if known is not None else next((r["_rows"] for r in got if r["_rows"] is not None), 0)
    if not rows or len(rows) > limit or ((target_size is not None or known is not None)
                                         and size < min_rows_per_key * len(rows)):
        return None
    if any(v is None for r in rows for v in r[:len(keys)]):  # a NULL key (null_safe): IN cannot match it
        return None

    def literal(i: int, value: str) -> str:
        kind = kinds[i]
        if kind in _SUFFIX:
            return f"{int(value)}{_SUFFIX[kind]}"
        if kind == "string":
            return _sql_str(value)
        if kind == "binary":
            return f"X{_sql_str(value)}"
        return f"CAST({_sql_str(value)} AS {kind})"

    if len(keys) == 1:
        values = ", ".join(literal(0, r[0]) for r in rows)
        return f"{alias}.{_col(keys[0])} IN ({values})"
    values = ", ".join("(" + ", ".join(literal(i, v) for i, v in enumerate(r[:len(keys)])) + ")" for r in rows)
    return f"({', '.join(f'{alias}.{_col(k)}' for k in keys)}) IN ({values})"
