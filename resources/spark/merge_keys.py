"""The MERGE's target side narrowed to the keys of the changes, before the join's shuffle.

What flows through: a delta's changes in; out, a predicate on the target's key columns
(``t.id IN (CAST('5' AS INT), ...)``) that `merge_upserts` adds to its ON condition.

Why: a MERGE with a WHEN NOT MATCHED clause joins target RIGHT OUTER source (the source's rows
are kept), which a broadcast of the source cannot do, so Spark plans a sort-merge join that
shuffled every row of the target (measured on 4M rows, bench/size_bench.py). Spark's runtime
bloom filter does not step in (the source's filter on its delta is pushed into the Iceberg scan,
so it sees no selective filter). A predicate in the ON condition that names only the target is
pushed below the join by the optimizer: each task then drops the rows of other keys as it scans
(a hash set lookup), and what is shuffled is O(delta). The table is still read (its key column
and row positions only): keys of a delta are spread over every file.

Exact: a target row can match a change only at one of the changes' keys, so adding "the target's
key is one of the changes' keys" to the ON condition changes no match. The list holds every key
of the changes (all of them or no filter: a key left out would turn an update into an insert).
"""

from __future__ import annotations

from collections.abc import Sequence

from resources.spark.iceberg import _col, _sql_str

# Up to this many distinct keys the filter goes into the MERGE's text (a 10k-key delta: ~0.3 MB
# of SQL); above, the MERGE runs without it (a delta that big is a good part of the table anyway).
MAX_FILTER_KEYS = 50_000

# Key types whose values go into the filter's text: those Spark casts to text and back exactly,
# and those sent as hex (`X'..'`, cast back).
_AS_TEXT = {"ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "DecimalType",
            "BooleanType", "DateType", "TimestampType", "TimestampNTZType"}
_AS_HEX = {"StringType", "BinaryType", "VarcharType", "CharType"}


def target_key_filter(changes, key_columns: Sequence[str], *, alias: str = "t",
                      limit: int = MAX_FILTER_KEYS, null_safe: bool = False) -> str | None:
    """SQL text restricting the MERGE target `alias` to the keys of `changes`, or None (more than
    `limit` keys, none, or a key of a type not in `_AS_TEXT`). Values travel as Spark's own text of
    them and are cast back to the key's type, so they round-trip exactly; strings and binary travel
    as hex (any bytes, valid UTF-8 or not). `null_safe`: the MERGE matches keys with `<=>` (a change
    stream's), so a NULL key matches a NULL key; an IN list cannot say that, so a change with a NULL
    in its key means no filter."""
    from pyspark.sql import functions as F

    keys = list(key_columns)
    types = {f.name: f.dataType for f in changes.schema.fields}
    kinds = [type(types[k]).__name__ for k in keys]
    if any(kind not in _AS_TEXT and kind not in _AS_HEX for kind in kinds):
        return None
    as_text = [F.hex(F.col(_col(k))) if kind in _AS_HEX else F.col(_col(k)).cast("string") for k, kind in zip(keys, kinds)]
    texts = changes.select(*[c.alias(f"k{i}") for i, c in enumerate(as_text)])
    if not null_safe:  # NULL keys fail the MERGE
        texts = texts.where(" AND ".join(f"k{i} IS NOT NULL" for i in range(len(keys))))
    rows = texts.distinct().limit(limit + 1).collect()
    if not rows or len(rows) > limit or any(v is None for r in rows for v in r):
        return None

    def literal(i: int, value: str) -> str:
        if kinds[i] in _AS_HEX:
            return f"CAST(X{_sql_str(value)} AS {types[keys[i]].simpleString()})"
        return f"CAST({_sql_str(value)} AS {types[keys[i]].simpleString()})"

    if len(keys) == 1:
        values = ", ".join(literal(0, r[0]) for r in rows)
        return f"{alias}.{_col(keys[0])} IN ({values})"
    values = ", ".join("(" + ", ".join(literal(i, v) for i, v in enumerate(r)) + ")" for r in rows)
    return f"({', '.join(f'{alias}.{_col(k)}' for k in keys)}) IN ({values})"
