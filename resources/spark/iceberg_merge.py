"""MERGE into deltaport's state tables: a delta's (or a fold's) changes by key, checked first (no
NULL key, no two different changes of one key), committed with the delta in its summary and
tagged (`resources/spark/iceberg.py` says what a commit records and guarantees).
"""

from __future__ import annotations

import contextlib
import re
import uuid
from dataclasses import dataclass
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import reduce
from typing import TYPE_CHECKING

from resources.failpoints import failpoint
from resources.spark.iceberg import (
    DELTAS_PROPERTY,
    DeltaCommit,
    IcebergTableError,
    KeyViolationError,
    _col,
    _quote,
    _ranges_text,
    _summary,
    _table_schema,
    _tag_commit,
)
from resources.spark.session_properties import own_property, session_snapshot_properties
from resources.spark.merge_keys import PRUNING_KEYS, target_key_filter, target_rows
from resources.spark.session import local_checkpoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def merge_upserts(
    spark: SparkSession,
    ident: str,
    changes_df: DataFrame,
    key_columns: Sequence[str],
    *,
    delta_num: int,
    op_column: str = "sys_op",
    extra_summary: Mapping[str, str] | None = None,
    checked: bool = False,
    folded: Sequence[int] = (),
    commit_id: str | None = None,
    rows: int | None = None,
    target_size: int | None = None,
    key_filter: KeyFilter | None = None,
) -> DeltaCommit:
    """Apply one delta's changes to the state table `ident` in ONE commit (MERGE INTO) that
    records delta `delta_num`, then tag it ``delta_<N>``.

    `folded`: the changes are the last change per key of these consecutive deltas, ending with
    `delta_num` (`latest_per_key`); the commit records them as ``deltaport.deltas`` and only
    the last is tagged: the states between are read back by `folded_commits`' readers from the
    commit's parent and the deltas' changes.

    Per key: `op_column` = 1 deletes the row; 0 (or NULL) updates it, or inserts it when
    missing. Every table column is assigned from the change of the same name (changes may carry
    more columns, such as `op_column`; a table column missing from the changes is an error).
    Exact duplicate changes are dropped (Kafka retries); a NULL key, or two different changes
    of one key, raise `KeyViolationError` and nothing is written: the check runs inside the
    MERGE's own job (`_checked_changes` is its source), which fails before its commit.
    `checked=True`: the caller passes `checkpoint_checked`'s result (e.g. for a whole range of
    deltas in one job, or changes that read the target table itself). `commit_id`: the id the
    commit records (default: a new one); MERGEs of one delta into several tables share one, and
    with it the session's commit properties, so they can run side by side. `rows`: how many
    changes there are, when the caller knows (the key filter's choice then needs no keys' job
    on a target too small for it: `merge_keys.target_key_filter`). `target_size`: the target's
    live rows, when the caller has read them already (else a query of its own asks). `key_filter`:
    `narrow_to_changed_keys`' answer, when the caller worked it out already (for the history's
    read of the same target).
    """
    quoted = _quote(ident)
    target = [f.name for f in _table_schema(spark, ident).fields]
    source = {c.lower(): c for c in changes_df.columns}
    keys = list(key_columns)
    missing = [c for c in [*keys, op_column] if c.lower() not in source]
    missing += [c for c in target if c.lower() not in source and c not in missing]
    if not keys or missing:
        raise IcebergTableError(
            f"{ident}: the changes lack column(s) {missing or 'key'} (have {changes_df.columns})"
        )
    not_in_table = [k for k in keys if k.lower() not in {t.lower() for t in target}]
    if not_in_table:
        raise IcebergTableError(f"{ident}: key column(s) {not_in_table} are not in the table {target}")

    if folded and (list(folded) != list(range(folded[0], folded[0] + len(folded))) or folded[-1] != delta_num):
        raise IcebergTableError(f"{ident}: a folded MERGE takes consecutive deltas ending with {delta_num}, "
                                f"got {list(folded)}")
    if folded:
        extra_summary = {**(extra_summary or {}), DELTAS_PROPERTY: _ranges_text(folded)}
    checks: contextlib.AbstractContextManager = contextlib.nullcontext()
    changes = changes_df
    if not checked:  # the key rules checked inside the MERGE's own job: no job of their own
        keys_as_given = [source[k.lower()] for k in keys]
        changes = _checked_changes(changes_df, keys_as_given, op_column=source[op_column.lower()])
        checks = _key_violations(ident, keys_as_given, deltas=[delta_num])
    op = f"s.{_col(source[op_column.lower()])}"
    on = " AND ".join(f"t.{_col(k)} = s.{_col(source[k.lower()])}" for k in keys)
    # The target's rows of other keys dropped as they are scanned, not shuffled, where the
    # target is big enough for that to pay (merge_keys.py).
    if key_filter is None:
        key_filter = narrow_to_changed_keys(spark, ident, changes_df.select(
            *[source[k.lower()] for k in keys]).toDF(*keys), keys, rows=rows, target_size=target_size)
    if key_filter.text:
        on = f"{on} AND {key_filter.text}"
    assign = ", ".join(f"t.{_col(c)} = s.{_col(source[c.lower()])}" for c in target)
    cols = ", ".join(_col(c) for c in target)
    vals = ", ".join(f"s.{_col(source[c.lower()])}" for c in target)
    return merge_and_tag(spark, ident, changes, lambda view: (
        f"MERGE INTO {quoted} AS t USING `{view}` AS s ON {on} "
        f"WHEN MATCHED AND {op} = 1 THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {assign} "
        f"WHEN NOT MATCHED AND ({op} IS NULL OR {op} <> 1) THEN INSERT ({cols}) VALUES ({vals})"),
        delta_num=delta_num, commit_id=commit_id or uuid.uuid4().hex, extra=extra_summary, checks=checks)


def insert_into_new(spark: SparkSession, ident: str, changes_df: DataFrame, key_columns: Sequence[str], *,
                    delta_num: int, columns: Sequence[str], op_column: str = "sys_op", checked: bool = False,
                    commit_id: str | None = None) -> DeltaCommit:
    """Apply one delta's changes to the state table `ident` that has no row yet (made by the
    same step, nothing committed to it): what `merge_upserts` would commit, as an INSERT of each
    key's change that is not a delete. Against no row every change is "not matched", so the
    MERGE's join, its key filter and its read of the target were work for nothing.

    The same commit as `merge_upserts`' (one, recording `delta_num` and `commit_id`, tagged
    ``delta_<N>``, the same failpoints) and the same key rules (exact duplicates dropped; a NULL
    key or two different changes of one key raise `KeyViolationError` inside the INSERT's own
    job, nothing written). `columns`: the table's (the caller made it); `checked`: the changes
    are `checkpoint_checked`'s result already."""
    quoted = _quote(ident)
    source = {c.lower(): c for c in changes_df.columns}
    keys = [source.get(k.lower(), k) for k in key_columns]
    missing = [c for c in [*key_columns, op_column, *columns] if c.lower() not in source]
    if not keys or missing:
        raise IcebergTableError(f"{ident}: the changes lack column(s) {missing or 'key'} (have {changes_df.columns})")
    op = source[op_column.lower()]
    changes, checks = changes_df, contextlib.nullcontext()
    if not checked:
        changes = _checked_changes(changes_df, keys, op_column=op)
        checks = _key_violations(ident, keys, deltas=[delta_num])
    cols = ", ".join(_col(c) for c in columns)
    vals = ", ".join(_col(source[c.lower()]) for c in columns)
    return merge_and_tag(spark, ident, changes, lambda view: (
        f"INSERT INTO {quoted} ({cols}) SELECT {vals} FROM `{view}` WHERE {_col(op)} IS NULL OR {_col(op)} <> 1"),
        delta_num=delta_num, commit_id=commit_id or uuid.uuid4().hex, checks=checks)


def merge_and_tag(spark, ident: str, source: DataFrame, sql_of_view: Callable[[str], str], *, delta_num: int,
                  commit_id: str, extra: Mapping[str, str] | None = None, own: Mapping[str, str] | None = None,
                  checks: contextlib.AbstractContextManager | None = None) -> DeltaCommit:
    """The MERGE (or INSERT) `sql_of_view(view)` into `ident`, `source` standing as the temp view `view`:
    one commit whose summary records `delta_num`, `commit_id`, `extra` and `own` (the table's
    own properties, keyed by it: `session_properties.own_property`; MERGEs into other tables
    may run beside with other ones), then tagged ``delta_<N>``. `checks`: a context the MERGE
    runs in (the key rules' errors, translated).
    The failpoints `snapshot.merge` (as it is sent) and `snapshot.committed` (before the tag)
    are passed here, for every snapshot MERGE."""
    view = f"deltaport_changes_{uuid.uuid4().hex}"
    try:
        source.createOrReplaceTempView(view)
        with checks or contextlib.nullcontext(), session_snapshot_properties(
                spark, _summary(delta_num, commit_id, extra), {own_property(k, ident): v for k, v in (own or {}).items()}):
            failpoint("snapshot.merge")
            spark.sql(sql_of_view(view))
    finally:
        spark.catalog.dropTempView(view)
    failpoint("snapshot.committed")
    return _tag_commit(spark, ident, delta_num, commit_id)


@dataclass(frozen=True)
class KeyFilter:
    """`target_key_filter`'s answer for one target and one set of changes: SQL text on alias `t`
    restricting the target to the changes' keys, or None. `prunes`: it names few enough keys for
    Iceberg to skip the data files and row groups whose key range holds none of them (its
    metrics evaluators give up on an IN list longer than `PRUNING_KEYS`)."""
    text: str | None
    prunes: bool = False


def narrow_to_changed_keys(spark, ident: str, keys_df: DataFrame, keys: Sequence[str], *, rows: int | None = None,
                           target_size: int | None = None, null_safe: bool = False) -> KeyFilter:
    """The MERGE's key filter (`merge_keys.target_key_filter`) for the changes' key columns
    `keys_df`, worked out once for the MERGE and the history's read of the same target.
    `rows`, `target_size`: as `merge_upserts` takes them; `null_safe`: the MERGE matches keys
    with `<=>` (a change stream's)."""
    text = target_key_filter(keys_df, keys, target_size=target_rows(spark, ident) if target_size is None else target_size,
                             changes_rows=rows, null_safe=null_safe)
    return KeyFilter(text, prunes=text is not None and rows is not None and rows <= PRUNING_KEYS)


def checkpoint_checked(ident: str, changes: DataFrame, key_columns: Sequence[str], *, deltas: Sequence[int],
                       op_column: str = "sys_op", delta_column: str | None = None) -> DataFrame:
    """`changes` materialized on the executors in one job that also drops exact duplicates and
    checks the key rules (`_checked_changes`): `KeyViolationError`, naming `ident` and the delta,
    before anything is committed. Column names are matched case-insensitively.

    Materialized for the callers that need the rows fixed before a MERGE: a range's changes,
    computed once for several MERGEs, and changes read from the MERGE's own target (a schema
    transition's rewrite, the whole table). A single delta's plain changes need none:
    `merge_upserts` checks them inside the MERGE (measured on a 709k-row delta: the Spark
    server's peak 2.6 -> 2.0 GiB, its summed job time 15.0 -> 10.4 s)."""
    have = {c.lower(): c for c in changes.columns}
    keys = [have[k.lower()] for k in key_columns]
    with _key_violations(ident, keys, deltas=deltas):
        return local_checkpoint(_checked_changes(changes, keys, op_column=have[op_column.lower()],
                                                 delta_column=delta_column))


_KEY_MARKER = "deltaport: key violation"


def _checked_changes(changes: DataFrame, key_columns: Sequence[str], *, op_column: str = "sys_op",
                    delta_column: str | None = None) -> DataFrame:
    """`changes` without exact duplicates, whose `op_column` raises (when the frame is computed)
    at a NULL key or a key with several different changes within one delta: the key rules
    checked inside the job that materializes the changes, not in a job of their own. One hash
    aggregation per key does both: the smallest and the greatest change of a key are equal
    exactly when all its changes are copies of one. With `delta_column`, keys are grouped per
    delta, so a range is checked at once. Compute it under `_key_violations` to get the failure
    as a `KeyViolationError`."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    keys = list(key_columns)
    group = keys + ([delta_column] if delta_column else [])
    rest = [c for c in changes.columns if c not in group]
    change = F.struct(*[F.col(_col(c)) for c in rest])
    per_key = changes.groupBy(*[F.col(_col(c)) for c in group]).agg(
        F.count(F.lit(1)).alias("_deltaport_n"), F.min(change).alias("_deltaport_lo"),
        F.max(change).alias("_deltaport_hi"))
    null_key = reduce(lambda a, b: a | b, [F.col(_col(k)).isNull() for k in keys])
    differ = ~F.col("_deltaport_lo").eqNullSafe(F.col("_deltaport_hi"))
    types = {f.name: f.dataType for f in changes.schema.fields}

    def shown(k: str):  # as Python's repr shows it, like the rest of deltaport's messages
        text = F.col(_col(k)).cast("string")
        if isinstance(types.get(k), T.StringType):
            text = F.concat(F.lit("'"), text, F.lit("'"))
        return F.concat(F.lit(f"{k}="), F.coalesce(text, F.lit("None")))

    delta = F.col(_col(delta_column)).cast("string") if delta_column else F.lit("")
    message = F.concat(F.lit(_KEY_MARKER + "|"), delta, F.lit("|"), F.concat_ws(", ", *[shown(k) for k in keys]),
                       F.lit(" ("), F.col("_deltaport_n").cast("string"), F.lit("x)|"))
    op = F.col("_deltaport_lo." + _col(op_column))
    return per_key.select(
        *[F.col(_col(c)) for c in group],
        *[(F.when(null_key | differ, F.raise_error(message)).otherwise(op) if c == op_column
           else F.col("_deltaport_lo." + _col(c))).alias(c) for c in rest])


def latest_per_key(changes: DataFrame, key_columns: Sequence[str], *, order_column: str) -> DataFrame:
    """Per key, the row with the greatest `order_column` (a range's deltas folded into one
    change per key: the last change wins, as applying them in order would leave it, since each
    change is a whole row or a delete). Ties are the caller's business: `_checked_changes`
    leaves one change per key and delta. One hash aggregation; `order_column` is kept."""
    from pyspark.sql import functions as F

    keys = list(key_columns)
    rest = [c for c in changes.columns if c not in keys]
    last = F.max_by(F.struct(*[F.col(_col(c)) for c in rest]), F.col(_col(order_column)))
    return (changes.groupBy(*[F.col(_col(k)) for k in keys]).agg(last.alias("_deltaport_last"))
            .select(*[F.col(_col(k)) for k in keys], *[F.col("_deltaport_last." + _col(c)).alias(c) for c in rest]))


@contextlib.contextmanager
def _key_violations(ident: str, key_columns: Sequence[str], *, deltas: Sequence[int]) -> Iterator[None]:
    """Turn the failure of a job computing `_checked_changes` into `KeyViolationError`."""
    from pyspark.errors import PySparkException

    try:
        yield
    except PySparkException as exc:
        found = re.search(re.escape(_KEY_MARKER) + r"\|([^|]*)\|([^|]*)\|", str(exc))
        if not found:
            raise
        which = found.group(1) or ", ".join(map(str, deltas))
        raise KeyViolationError(
            f"{ident}: delta {which} has NULL keys or several different changes of one key "
            f"(key {list(key_columns)}; e.g. {found.group(2)}); nothing was written"
        ) from None
