"""Iceberg table helpers for delta-partitioned assets: create/evolve, commit a delta, upsert.

Data flow: an asset builds a Spark DataFrame for delta N, then either
``commit_delta`` (increment tables: append, replace the rows of delta N, or overwrite all) or
``merge_upserts`` (snapshot tables: state N-1 + changes of N, upsert on sys_op 0, delete on 1).

What this module guarantees:

* Every write is ONE Iceberg commit whose snapshot summary records ``deltaport.delta=<N>``
  (plus a unique ``deltaport.commit-id`` and any `extra_summary`): the delta number lands
  atomically with the data, so `last_applied_delta` can never disagree with the rows.
  DataFrame writes use the ``snapshot-property.<key>`` write option; MERGE (SQL, no write
  options) uses the session settings ``spark.sql.iceberg.snapshot-property.<key>``, set only
  for the duration of the statement under a process-wide lock and restored afterwards (a
  write issued meanwhile by other code on the same session would carry them too).
* After the commit, the snapshot found by its commit id (not "the current one", which another
  writer may have moved) is tagged ``delta_<N>`` (CREATE OR REPLACE: re-running N moves the
  tag). Tagging is a second, metadata-only commit; if a process dies between the two, the
  next writer tags it before going on (`last_applied_deltas(repair_tags=True)`), and
  `repair_delta_tags` redoes every missing tag of a history. A delta that leaves a state
  table unchanged costs no data commit: `tag_unchanged` tags the current snapshot (one commit,
  so the delta is recorded or not), and `last_applied_delta` counts tags on the current
  snapshot too.
* A range run's state-table commit may fold several consecutive deltas (`merge_upserts` with
  `folded`: each key's last change of the range): its summary records them all as
  ``deltaport.deltas`` (``a-b``) and only the last is tagged; `folded_commits` lists such
  commits for readers that rebuild the deltas inside (resources/lake/prostore.py).
* ``replace_delta`` replaces exactly the rows whose delta column equals N (overwrite by filter:
  delete + insert in one commit), so re-running N is idempotent; `replace_deltas` does the
  same for a range of deltas in one commit (a range run's increment and meta tables). Rows of another delta in the
  DataFrame fail the write (nothing is committed). Partition such tables by the delta column:
  the filter then drops whole partitions. Unpartitioned works while every data file holds one
  delta (Iceberg proves it from column statistics, kept for the first 100 columns by default);
  a file mixing deltas (e.g. after compaction) makes Iceberg refuse the overwrite.
* `ensure_table` never drops or narrows a column: new columns are added (old rows read NULL),
  int→bigint and float→double are widened, anything else raises `SchemaEvolutionError`.

Identifiers are ``catalog.namespace[.more].table``. Prostore TIME is stored as bigint
microseconds since midnight: Spark 4.1's TimeType is off by default, and with it on, Iceberg
1.11's Spark runtime still refuses Iceberg ``time`` both ways ("Not a supported type: time(6)"
when writing, "Spark does not support time fields" when reading).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Literal

from resources.errors import BadInputError, DeltaportError
from resources.failpoints import failpoint
from resources.spark import existence
from resources.spark.session import local_checkpoint

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "COMMIT_ID_PROPERTY",
    "DELTAS_PROPERTY",
    "DELTA_PROPERTY",
    "DeltaCommit",
    "DeltaNotFoundError",
    "EnsuredTable",
    "FoldedCommit",
    "InsideFold",
    "IcebergTableError",
    "KeyViolationError",
    "SchemaEvolutionError",
    "TABLE_PROPERTIES",
    "TIME_COMMENT",
    "TableNotFoundError",
    "WriteMode",
    "checkpoint_checked",
    "commit_delta",
    "committed_records",
    "delta_tag",
    "delta_tags",
    "ensure_table",
    "folded_commits",
    "last_applied_delta",
    "last_applied_deltas",
    "latest_per_key",
    "merge_upserts",
    "read_as_of_delta",
    "repair_delta_tags",
    "replace_deltas",
    "spark_schema",
    "state_as_of_delta",
    "record_unchanged",
    "table_exists",
    "tag_unchanged",
    "without_session_properties",
]

DELTA_PROPERTY = "deltaport.delta"
COMMIT_ID_PROPERTY = "deltaport.commit-id"
DELTAS_PROPERTY = "deltaport.deltas"  # every delta a range commit replaced, e.g. "3-7"
TIME_COMMENT = "Prostore TIME: microseconds since midnight"
# Every table deltaport creates keeps its last 20 metadata files, not all of them. Each commit
# (a delta's write, MERGE or tag) writes a new metadata file holding the whole snapshot and tag
# list, so keeping them all grows the lake quadratically: 600 deltas of one tagged table left
# 1201 files, 0.6 MB each at the end. Readers need only the current file (time travel reads
# snapshots and tags from it).
TABLE_PROPERTIES = {"write.metadata.delete-after-commit.enabled": "true",
                    "write.metadata.previous-versions-max": "20"}
WriteMode = Literal["replace_delta", "append", "overwrite"]
_WRITE_MODES = ("replace_delta", "append", "overwrite")
_SESSION_PROPERTY_PREFIX = "spark.sql.iceberg.snapshot-property."
_namespace_lock = threading.Lock()  # one CREATE NAMESPACE at a time in this process
_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_$-]*$")


class IcebergTableError(DeltaportError):
    """An Iceberg table operation could not be done as asked."""


class TableNotFoundError(IcebergTableError):
    """The table does not exist."""


class SchemaEvolutionError(IcebergTableError):
    """The wanted schema cannot be reached by adding or widening columns."""


class DeltaNotFoundError(IcebergTableError):
    """No ``delta_<N>`` tag on the table."""


class KeyViolationError(IcebergTableError, BadInputError):
    """Changes with a NULL key, or two different changes of one key in one delta."""


@dataclass(frozen=True)
class DeltaCommit:
    """The Iceberg snapshot that recorded delta `delta_num`, and the tag now pointing at it."""

    ident: str
    delta_num: int
    snapshot_id: int
    tag: str
    operation: str
    summary: Mapping[str, str]


@dataclass(frozen=True)
class EnsuredTable:
    created: bool
    added_columns: tuple[str, ...] = ()
    widened_columns: tuple[str, ...] = ()


def delta_tag(delta_num: int) -> str:
    return f"delta_{int(delta_num)}"


def _quote(ident: str) -> str:
    parts = ident.split(".")
    if len(parts) < 3 or not all(_PART.match(p) for p in parts):
        raise IcebergTableError(
            f"table identifier must be catalog.namespace.table (letters, digits, '_'), got {ident!r}"
        )
    return ".".join(f"`{p}`" for p in parts)


def _col(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql_str(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# --------------------------------------------------------------------------------------------
# Schemas


def spark_schema(schema: pa.Schema | StructType) -> StructType:
    """A Spark schema for Iceberg from an Arrow (or Spark) schema. Arrow time32/time64 become
    bigint microseconds since midnight (commented so); timestamps without zone become
    TIMESTAMP_NTZ, with a zone TIMESTAMP. Every field is nullable (Iceberg cannot add a
    required column later, and a MERGE source is nullable anyway)."""
    from pyspark.sql import types as T

    if isinstance(schema, T.StructType):
        return T.StructType([T.StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])
    return T.StructType([_arrow_field(f) for f in schema])


def _arrow_field(f: pa.Field):  # -> StructField
    import pyarrow as pa
    from pyspark.sql import types as T

    t = f.type
    meta: dict = {}
    if pa.types.is_time(t):
        dtype: DataType = T.LongType()
        meta = {"comment": TIME_COMMENT}
    elif pa.types.is_timestamp(t):
        dtype = T.TimestampType() if t.tz else T.TimestampNTZType()
    elif pa.types.is_int64(t) or pa.types.is_uint32(t):
        dtype = T.LongType()
    elif pa.types.is_integer(t) and t.bit_width <= 32 and not pa.types.is_uint32(t):
        dtype = T.IntegerType()
    elif pa.types.is_boolean(t):
        dtype = T.BooleanType()
    elif pa.types.is_float32(t) or pa.types.is_float16(t):
        dtype = T.FloatType()
    elif pa.types.is_float64(t):
        dtype = T.DoubleType()
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        dtype = T.StringType()
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        dtype = T.BinaryType()
    elif pa.types.is_date(t):
        dtype = T.DateType()
    elif pa.types.is_decimal(t):
        dtype = T.DecimalType(t.precision, t.scale)
    else:
        raise SchemaEvolutionError(f"column {f.name!r}: no Iceberg mapping for Arrow type {t}")
    return T.StructField(f.name, dtype, True, meta)


def _field_ddl(f) -> str:
    comment = (f.metadata or {}).get("comment")
    tail = f" COMMENT {_sql_str(comment)}" if comment else ""
    return f"{_col(f.name)} {f.dataType.simpleString()}{tail}"


def _evolution(have: DataType, want: DataType) -> Literal["same", "widen", "no"]:
    from pyspark.sql import types as T

    if have == want:
        return "same"
    # Iceberg stores byte/short as int: writing them into int (or wider) needs no change.
    narrow_ints = (T.ByteType, T.ShortType, T.IntegerType)
    if isinstance(have, T.IntegerType) and isinstance(want, narrow_ints):
        return "same"
    if isinstance(have, T.LongType) and isinstance(want, (*narrow_ints, T.LongType)):
        return "same"
    if isinstance(have, T.DoubleType) and isinstance(want, T.FloatType):
        return "same"
    if isinstance(have, T.IntegerType) and isinstance(want, T.LongType):
        return "widen"
    if isinstance(have, T.FloatType) and isinstance(want, T.DoubleType):
        return "widen"
    if (isinstance(have, T.DecimalType) and isinstance(want, T.DecimalType)
            and have.scale == want.scale and want.precision > have.precision):
        return "widen"
    return "no"


def table_exists(spark: SparkSession, ident: str) -> bool:
    _quote(ident)
    return existence.table_exists(spark, ident)  # the catalog's answer, no failing call


def _schema_or_none(spark: SparkSession, ident: str) -> StructType | None:
    _quote(ident)
    return existence.schema_or_none(spark, ident)


def _table_schema(spark: SparkSession, ident: str) -> StructType:
    schema = _schema_or_none(spark, ident)
    if schema is None:
        raise TableNotFoundError(f"Iceberg table {ident} does not exist")
    return schema


def ensure_table(
    spark: SparkSession,
    ident: str,
    schema: pa.Schema | StructType,
    partition_by: Sequence[str] | None = None,
    *,
    properties: Mapping[str, str] | None = None,
) -> EnsuredTable:
    """Create `ident` (and its namespace) if missing, else evolve it towards `schema`.

    `partition_by`: column names, or Iceberg transforms such as ``days(ts)``, ``bucket(16, id)``
    (used at creation only). `properties`: table properties at creation, over `TABLE_PROPERTIES`.
    Evolution only adds columns (at the end, nullable) or widens int→bigint / float→double /
    decimal precision; columns missing from `schema` are kept. Anything else raises
    `SchemaEvolutionError`.
    """
    quoted = _quote(ident)
    wanted = spark_schema(schema)
    names = [f.name.lower() for f in wanted.fields]
    if len(set(names)) != len(names):
        raise SchemaEvolutionError(f"{ident}: duplicate column names (case-insensitive) in {names}")
    current = _schema_or_none(spark, ident)
    if current is None:
        namespace = ".".join(quoted.split(".")[:-1])
        # Tables created side by side share a namespace: IF NOT EXISTS is check-then-insert in
        # a JDBC catalog, so two threads creating it at once collide on its unique key.
        with _namespace_lock:
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        parts = [p if "(" in p else _col(p) for p in (partition_by or [])]
        columns = ", ".join(_field_ddl(f) for f in wanted.fields)
        ddl = f"CREATE TABLE IF NOT EXISTS {quoted} ({columns}) USING iceberg"
        if parts:
            ddl += f" PARTITIONED BY ({', '.join(parts)})"
        props = ", ".join(f"{_sql_str(k)}={_sql_str(str(v))}"
                          for k, v in {**TABLE_PROPERTIES, **(properties or {})}.items())
        ddl += f" TBLPROPERTIES ({props})"
        spark.sql(ddl)
        return EnsuredTable(created=True)

    have = {f.name.lower(): f for f in current.fields}
    added, widened, problems = [], [], []
    for f in wanted.fields:
        current = have.get(f.name.lower())
        if current is None:
            added.append(f)
            continue
        verdict = _evolution(current.dataType, f.dataType)
        if verdict == "widen":
            widened.append(f)
        elif verdict == "no":
            problems.append(f"{f.name}: table has {current.dataType.simpleString()}, "
                            f"data has {f.dataType.simpleString()}")
    if problems:
        raise SchemaEvolutionError(f"{ident}: cannot evolve column types ({'; '.join(problems)})")
    if added:
        spark.sql(f"ALTER TABLE {quoted} ADD COLUMNS ({', '.join(_field_ddl(f) for f in added)})")
    for f in widened:
        column = _col(have[f.name.lower()].name)
        spark.sql(f"ALTER TABLE {quoted} ALTER COLUMN {column} TYPE {f.dataType.simpleString()}")
    return EnsuredTable(created=False, added_columns=tuple(f.name for f in added),
                        widened_columns=tuple(f.name for f in widened))


# --------------------------------------------------------------------------------------------
# Writes


def _summary(delta_num: int, commit_id: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    props = {str(k): str(v) for k, v in (extra or {}).items()}
    props[DELTA_PROPERTY] = str(int(delta_num))
    props[COMMIT_ID_PROPERTY] = commit_id
    return props


def _tag_commit(spark: SparkSession, ident: str, delta_num: int, commit_id: str) -> DeltaCommit:
    quoted = _quote(ident)
    rows = spark.sql(
        f"SELECT snapshot_id, operation, summary FROM {quoted}.`snapshots` "
        f"WHERE summary[{_sql_str(COMMIT_ID_PROPERTY)}] = {_sql_str(commit_id)}"
    ).collect()
    if not rows:
        raise IcebergTableError(f"{ident}: the write of delta {delta_num} left no snapshot (commit {commit_id})")
    snapshot_id, operation, summary = rows[0]
    tag = delta_tag(delta_num)
    spark.sql(f"ALTER TABLE {quoted} CREATE OR REPLACE TAG `{tag}` AS OF VERSION {int(snapshot_id)}")
    return DeltaCommit(ident, int(delta_num), int(snapshot_id), tag, operation, dict(summary))


def commit_delta(
    spark: SparkSession,
    ident: str,
    df: DataFrame,
    *,
    delta_num: int,
    mode: WriteMode,
    extra_summary: Mapping[str, str] | None = None,
    delta_column: str = "delta_num",
    tag: bool = True,
) -> DeltaCommit | None:
    """Write `df` into the existing table `ident` as one commit recording delta `delta_num`,
    then tag that snapshot ``delta_<N>`` (`tag=False`: no tag and None returned, for tables
    nobody time-travels by delta; the summary still records N).

    `mode`: ``append`` adds the rows; ``overwrite`` replaces the whole table with them;
    ``replace_delta`` replaces exactly the rows whose `delta_column` equals N (re-running N is
    idempotent). For ``replace_delta`` a missing `delta_column` in `df` is filled with N; a row
    with another value fails the write (nothing is committed, `IcebergTableError`).
    Columns are matched by name.
    """
    if mode not in _WRITE_MODES:
        raise IcebergTableError(f"mode must be one of {_WRITE_MODES}, got {mode!r}")
    commit_id = _write(spark, ident, df, [int(delta_num)], mode, extra_summary, delta_column)
    return _tag_commit(spark, ident, delta_num, commit_id) if tag else None


def replace_deltas(
    spark: SparkSession,
    ident: str,
    df: DataFrame,
    deltas: Sequence[int],
    *,
    extra_summary: Mapping[str, str] | None = None,
    delta_column: str = "delta_num",
) -> str:
    """Replace the rows of every delta in `deltas` with `df` in ONE commit (a range run lands
    its deltas of an increment or meta table at once). `df` must carry `delta_column`; a row of
    a delta not in `deltas` fails the write (nothing is committed). The summary records the
    last delta as ``deltaport.delta`` and the whole set as ``deltaport.deltas``; no tag: such
    tables are read by their delta column, never by time travel. Returns the commit's id
    (`committed_records` reads what it added)."""
    deltas = sorted({int(d) for d in deltas})
    if not deltas:
        raise IcebergTableError(f"{ident}: replace_deltas needs at least one delta")
    if delta_column.lower() not in {c.lower() for c in df.columns}:
        raise IcebergTableError(f"{ident}: the rows lack the {delta_column!r} column replace_deltas needs")
    summary = {**(extra_summary or {}), DELTAS_PROPERTY: _ranges_text(deltas)}
    return _write(spark, ident, df, deltas, "replace_delta", summary, delta_column)


def committed_records(spark: SparkSession, commits: Mapping[str, str]) -> dict[str, int]:
    """{ident: the rows its commit added} for {ident: commit id} (`replace_deltas`), from the
    commits' own summaries (Iceberg's ``added-records``): one query over the tables' snapshot
    metadata, however large the data. A commit not found is left out."""
    if not commits:
        return {}
    parts = [f"SELECT {_sql_str(ident)} AS ident, CAST(summary['added-records'] AS BIGINT) AS added "
             f"FROM {_quote(ident)}.`snapshots` WHERE summary[{_sql_str(COMMIT_ID_PROPERTY)}] = {_sql_str(commit)}"
             for ident, commit in commits.items()]
    # No refresh: the writing session's catalog already holds its own commit (as `_tag_commit`).
    rows = spark.sql(" UNION ALL ".join(parts)).collect()
    return {r["ident"]: int(r["added"] or 0) for r in rows}


def _ranges_text(deltas: Sequence[int]) -> str:
    """[3, 4, 5, 9] -> "3-5,9": the deltas of one commit, short however long the range."""
    spans: list[list[int]] = []
    for d in deltas:
        if spans and d == spans[-1][1] + 1:
            spans[-1][1] = d
        else:
            spans.append([d, d])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _write(spark: SparkSession, ident: str, df: DataFrame, deltas: Sequence[int], mode: WriteMode,
           extra_summary: Mapping[str, str] | None, delta_column: str) -> str:
    """One commit of `df` recording the last of `deltas`; returns its commit id."""
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    table = _table_schema(spark, ident)
    commit_id = uuid.uuid4().hex
    options = {f"snapshot-property.{k}": v for k, v in _summary(deltas[-1], commit_id, extra_summary).items()}
    which = _ranges_text(deltas)
    marker = f"deltaport: replace_delta {which} of {ident} got a row of another delta"
    if mode == "replace_delta":
        have = {f.name.lower(): f for f in table.fields}
        if delta_column.lower() not in have:
            raise IcebergTableError(f"{ident} has no {delta_column!r} column: replace_delta needs one")
        delta_type = have[delta_column.lower()].dataType
        present = [c for c in df.columns if c.lower() == delta_column.lower()]
        if present:  # checked row by row inside the write: no extra pass over the data
            c = F.col(_col(present[0]))
            checked = F.when(c.isin(*deltas), c).otherwise(F.raise_error(F.lit(marker)))
            df = df.withColumn(present[0], checked)
        else:
            df = df.withColumn(delta_column, F.lit(deltas[0]).cast(delta_type))
    # No shuffle before the write: a write's rows arrive grouped by delta already (each task
    # reads one delta's Kafka slice or local rows), and for a table without a sort order Iceberg
    # then opens one file per partition a task meets (fanout). The default (hash) shuffled every
    # row once more: measured 1.14 -> 0.58 s for a 150k-row delta, 4.8 -> 2.7 s for five, on 2 cores.
    options["distribution-mode"] = "none"
    writer = df.writeTo(ident).options(**options)
    try:
        # Not while a MERGE holds the session's commit properties: this commit would record them.
        with without_session_properties(spark):
            if mode == "append":
                writer.append()
            elif mode == "overwrite":
                writer.overwrite(F.lit(True))
            else:
                writer.overwrite(F.col(_col(delta_column)).isin(*deltas))
    except PySparkException as exc:
        if marker in str(exc):
            raise IcebergTableError(f"{marker}; nothing was committed") from None
        raise
    return commit_id


class _SessionProperties:
    """Who holds the session-wide snapshot properties now. Blocks asking for the same
    properties of the same session share them (the MERGEs of one delta into several tables,
    run side by side); a block asking for others waits until the last holder has left."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.held: tuple | None = None  # (session, sorted properties) being held
        self.holders = 0
        self.before: dict[str, str | None] = {}


_held_properties = _SessionProperties()


@contextlib.contextmanager
def _session_snapshot_properties(spark: SparkSession, props: Mapping[str, str]) -> Iterator[None]:
    """Set ``spark.sql.iceberg.snapshot-property.*`` for the block (SQL writes have no write
    options). The setting is session-wide: blocks with other properties are serialised, blocks
    with the same ones run together (`_SessionProperties`), and old values are restored when
    the last one leaves."""
    keys = {_SESSION_PROPERTY_PREFIX + k: str(v) for k, v in props.items()}
    wanted = (id(spark), tuple(sorted(keys.items())))
    state = _held_properties
    with state.changed:
        while state.holders and state.held != wanted:
            state.changed.wait()
        if not state.holders:
            state.before = {k: spark.conf.get(k, None) for k in keys}
            try:
                for k, v in keys.items():
                    spark.conf.set(k, v)
            except BaseException:
                _restore(spark, state.before)
                raise
            state.held = wanted
        state.holders += 1
    try:
        yield
    finally:
        with state.changed:
            state.holders -= 1
            if not state.holders:
                state.held = None
                try:
                    _restore(spark, state.before)
                finally:
                    state.changed.notify_all()


def without_session_properties(spark: SparkSession):
    """A block for a commit that must not record another block's snapshot properties (a write,
    a DELETE, run beside MERGEs that hold them): it waits until they are unset."""
    return _session_snapshot_properties(spark, {})


def _restore(spark: SparkSession, before: Mapping[str, str | None]) -> None:
    for k, old in before.items():
        if old is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, old)


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
    with it the session's commit properties, so they can run side by side.
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
    view = f"deltaport_changes_{uuid.uuid4().hex}"
    try:
        changes.createOrReplaceTempView(view)
        op = f"s.{_col(source[op_column.lower()])}"
        on = " AND ".join(f"t.{_col(k)} = s.{_col(source[k.lower()])}" for k in keys)
        assign = ", ".join(f"t.{_col(c)} = s.{_col(source[c.lower()])}" for c in target)
        cols = ", ".join(_col(c) for c in target)
        vals = ", ".join(f"s.{_col(source[c.lower()])}" for c in target)
        sql = (
            f"MERGE INTO {quoted} AS t USING `{view}` AS s ON {on} "
            f"WHEN MATCHED AND {op} = 1 THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {assign} "
            f"WHEN NOT MATCHED AND ({op} IS NULL OR {op} <> 1) THEN INSERT ({cols}) VALUES ({vals})"
        )
        commit_id = commit_id or uuid.uuid4().hex
        with checks, _session_snapshot_properties(spark, _summary(delta_num, commit_id, extra_summary)):
            failpoint("snapshot.merge")
            spark.sql(sql)
    finally:
        spark.catalog.dropTempView(view)
    failpoint("snapshot.committed")
    return _tag_commit(spark, ident, delta_num, commit_id)


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


# --------------------------------------------------------------------------------------------
# Reads


def last_applied_delta(spark: SparkSession, ident: str) -> int | None:
    """The delta recorded by the newest deltaport commit in the table's current history (the
    current snapshot's summary, unless maintenance such as compaction committed after it), or
    None when no delta was ever committed. Raises `TableNotFoundError` for a missing table."""
    found = last_applied_deltas(spark, [ident])
    if ident not in found:
        raise TableNotFoundError(f"Iceberg table {ident} does not exist")
    return found[ident]


def last_applied_deltas(spark: SparkSession, idents: Sequence[str], *,
                        repair_tags: bool = False) -> dict[str, int | None]:
    """`last_applied_delta` of several tables at once: {ident: delta or None} for the tables
    that exist (a missing one is left out). One query, plain scans of metadata tables (a join
    or a LIMIT per table costs more planning and jobs than the rows it saves): every table's
    current snapshot, `delta_<N>` tags and commits recording a delta. The newest such tag or
    commit on the current snapshot is the answer (a delta that left the table unchanged is
    recorded by its tag alone: `tag_unchanged`); only a table whose current snapshot has
    neither (maintenance committed after the last delta, or a rollback) costs a walk of its
    history. The rows grow by about two per delta: tens of thousands after years of deltas.

    `repair_tags=True` (writers, before they go on): a last applied delta whose commit lacks its
    ``delta_<N>`` tag (the process died between the two) is tagged now, so reading as of N
    stays exact; it costs nothing when every tag is there."""
    existing = [i for i in dict.fromkeys(idents) if _refreshed(spark, i)]
    if not existing:
        return {}
    delta = _sql_str(DELTA_PROPERTY)
    parts = []
    for ident in existing:
        q, name = _quote(ident), _sql_str(ident)
        parts += [
            f"SELECT {name} AS ident, type AS kind, snapshot_id, "
            "CASE WHEN type = 'TAG' THEN CAST(substring(name, 7) AS BIGINT) END AS delta "
            f"FROM {q}.`refs` WHERE (type = 'BRANCH' AND name = 'main') OR "
            "(type = 'TAG' AND name RLIKE '^delta_[0-9]+$')",
            f"SELECT {name} AS ident, 'COMMIT' AS kind, snapshot_id, CAST(summary[{delta}] AS BIGINT) AS delta "
            f"FROM {q}.`snapshots` WHERE summary[{delta}] IS NOT NULL"]
    rows = spark.sql(" UNION ALL ".join(parts)).collect()
    current = {r["ident"]: r["snapshot_id"] for r in rows if r["kind"] == "BRANCH"}
    newest: dict[str, int] = {}
    tagged: set[tuple[str, int]] = set()  # (ident, delta) tagged on the current snapshot
    for r in rows:
        if r["kind"] != "BRANCH" and r["delta"] is not None and r["snapshot_id"] == current.get(r["ident"]):
            newest[r["ident"]] = max(newest.get(r["ident"], -1), int(r["delta"]))
            if r["kind"] == "TAG":
                tagged.add((r["ident"], int(r["delta"])))
    out: dict[str, int | None] = {}
    for ident in existing:
        if ident not in current:  # no snapshot yet
            out[ident] = None
        elif ident in newest:
            out[ident] = newest[ident]
            if repair_tags and (ident, newest[ident]) not in tagged:
                _log.warning("%s: delta %d was committed but not tagged (a process died between the two); "
                             "tagging it now", ident, newest[ident])
                spark.sql(f"ALTER TABLE {_quote(ident)} CREATE OR REPLACE TAG `{delta_tag(newest[ident])}` "
                          f"AS OF VERSION {int(current[ident])}")
        else:
            out[ident] = _newest_committed_delta(spark, ident)
            if repair_tags:
                repair_delta_tags(spark, ident)
    return out


def _refreshed(spark: SparkSession, ident: str) -> bool:
    """Refresh the session's cached metadata of `ident` (another process may have committed
    since); False when the table does not exist."""
    _quote(ident)
    return existence.refreshed(spark, ident)


def _newest_committed_delta(spark: SparkSession, ident: str) -> int | None:
    """The delta of the newest commit in the current history that records one (the current
    snapshot is a maintenance commit, or a crash came between a commit and its tag)."""
    quoted = _quote(ident)
    rows = spark.sql(
        f"SELECT CAST(s.summary[{_sql_str(DELTA_PROPERTY)}] AS BIGINT) AS delta FROM {quoted}.`history` h "
        f"JOIN {quoted}.`snapshots` s ON h.snapshot_id = s.snapshot_id "
        f"WHERE h.is_current_ancestor AND s.summary[{_sql_str(DELTA_PROPERTY)}] IS NOT NULL "
        "ORDER BY h.made_current_at DESC LIMIT 1").collect()
    return int(rows[0]["delta"]) if rows else None


def tag_unchanged(spark: SparkSession, ident: str, delta_num: int) -> bool:
    """Record delta N for a table it leaves as it is: the tag ``delta_<N>`` on the current
    snapshot, one metadata commit and no data commit (`last_applied_delta` reads it back).
    False, with nothing done, when the table has no snapshot yet (the caller commits instead)."""
    from pyspark.errors import PySparkException

    quoted = _quote(ident)
    spark.catalog.refreshTable(ident)
    try:  # without AS OF VERSION, Iceberg tags the current snapshot: no query to find it
        spark.sql(f"ALTER TABLE {quoted} CREATE OR REPLACE TAG `{delta_tag(delta_num)}`")
    except PySparkException as exc:
        if "main has no snapshot" in str(exc):  # Iceberg's words for a table never written
            return False
        raise
    return True


def record_unchanged(spark: SparkSession, ident: str, schema: StructType, delta_num: int, *, new: bool = False) -> None:
    """Record delta N in a table it leaves as it is: `tag_unchanged`, or, when the table has no
    snapshot yet, an empty commit (summary and tag, as `commit_delta` makes them). `new`: just
    created, so that commit at once (a tag on no snapshot is a failed call, logged at ERROR)."""
    if new or not tag_unchanged(spark, ident, delta_num):
        commit_delta(spark, ident, spark.createDataFrame([], schema), delta_num=delta_num, mode="append")


def delta_tags(spark: SparkSession, ident: str) -> dict[int, int]:
    """``{delta number: snapshot id}`` for every ``delta_<N>`` tag of the table, as committed now
    (the session's cached metadata is refreshed first: a long-lived session would otherwise
    keep reading the tags it saw when it first loaded the table)."""
    quoted = _quote(ident)
    spark.catalog.refreshTable(ident)
    rows = spark.sql(f"SELECT name, snapshot_id FROM {quoted}.`refs` WHERE type = 'TAG'").collect()
    out = {}
    for name, snapshot_id in rows:
        m = re.fullmatch(r"delta_(\d+)", name)
        if m:
            out[int(m.group(1))] = int(snapshot_id)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class FoldedCommit:
    """A state-table commit that applied several deltas at once (`merge_upserts(folded=...)`):
    the state after each of `deltas` but the last is its parent's plus those deltas' changes."""

    deltas: tuple[int, ...]
    snapshot_id: int
    parent_id: int | None
    summary: Mapping[str, str] = field(default_factory=dict)  # the commit's whole summary


def folded_commits(spark: SparkSession, ident: str) -> list[FoldedCommit]:
    """The table's folded commits, oldest first: one plain scan of its snapshots (a join with
    its history, to leave out commits a rollback undid, costs seconds; deltaport never rolls
    back, and a newer commit of the same deltas comes later in the list)."""
    quoted = _quote(ident)
    rows = spark.sql(
        f"SELECT snapshot_id, parent_id, summary FROM {quoted}.`snapshots` "
        f"WHERE summary[{_sql_str(DELTAS_PROPERTY)}] IS NOT NULL ORDER BY committed_at").collect()
    return [FoldedCommit(tuple(_ranges_parse(r["summary"][DELTAS_PROPERTY])), int(r["snapshot_id"]),
                         None if r["parent_id"] is None else int(r["parent_id"]), dict(r["summary"]))
            for r in rows]


@dataclass(frozen=True)
class InsideFold:
    """A state table as of a delta inside a folded commit, before the fold's changes: `base`,
    the state before the fold in the fold commit's columns (`schema`; columns the fold added are
    NULL), for the caller to apply the fold's deltas up to the one asked for."""

    fold: FoldedCommit
    schema: StructType
    base: DataFrame


def state_as_of_delta(spark: SparkSession, ident: str, delta_num: int) -> DataFrame | InsideFold:
    """The state table `ident` right after `delta_num`: by its ``delta_<N>`` tag, or, for a delta
    inside a folded commit, `InsideFold` (the state before the fold: the previous delta's tag,
    which keeps its snapshot from expiring should maintenance commit in between, else the
    fold's parent, else empty: the table was born in the fold). Raises `DeltaNotFoundError` when
    neither records N."""
    from pyspark.sql import functions as F

    quoted = _quote(ident)
    tags = delta_tags(spark, ident)
    if delta_num in tags:
        return spark.sql(f"SELECT * FROM {quoted} VERSION AS OF {tags[delta_num]}")
    covering = [c for c in folded_commits(spark, ident) if delta_num in c.deltas]
    if not covering:
        return read_as_of_delta(spark, ident, delta_num)  # raises DeltaNotFoundError, naming the tags
    fold = covering[-1]
    schema = spark.sql(f"SELECT * FROM {quoted} VERSION AS OF {fold.snapshot_id}").schema
    before = tags.get(fold.deltas[0] - 1, fold.parent_id)
    if before is None:
        return InsideFold(fold, schema, spark.createDataFrame([], schema))
    base = spark.sql(f"SELECT * FROM {quoted} VERSION AS OF {before}")
    have = {c.lower(): c for c in base.columns}
    base = base.select(*[F.col(_col(have[f.name.lower()])).cast(f.dataType).alias(f.name) if f.name.lower() in have
                         else F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields])
    return InsideFold(fold, schema, base)


def _ranges_parse(text: str) -> list[int]:
    """"3-5,9" -> [3, 4, 5, 9] (`_ranges_text` backwards)."""
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def read_as_of_delta(spark: SparkSession, ident: str, delta_num: int) -> DataFrame:
    """The table as it was right after delta `delta_num` was committed (time travel by the
    ``delta_<N>`` tag). Raises `DeltaNotFoundError` naming the deltas that are tagged."""
    quoted = _quote(ident)
    tags = delta_tags(spark, ident)
    if int(delta_num) not in tags:
        raise DeltaNotFoundError(
            f"{ident} has no tag {delta_tag(delta_num)} (tagged deltas: {list(tags) or 'none'})"
        )
    return spark.sql(f"SELECT * FROM {quoted} VERSION AS OF {_sql_str(delta_tag(delta_num))}")


def repair_delta_tags(spark: SparkSession, ident: str) -> list[int]:
    """Tag ``delta_<N>`` every delta whose newest commit in the current history is not tagged
    so (a process died between a commit and its tag); returns the deltas tagged now."""
    quoted = _quote(ident)
    rows = spark.sql(
        f"SELECT s.snapshot_id, s.summary[{_sql_str(DELTA_PROPERTY)}] AS delta FROM {quoted}.`history` h "
        f"JOIN {quoted}.`snapshots` s ON h.snapshot_id = s.snapshot_id "
        f"WHERE h.is_current_ancestor AND s.summary[{_sql_str(DELTA_PROPERTY)}] IS NOT NULL "
        "ORDER BY h.made_current_at"
    ).collect()
    newest: dict[int, int] = {}
    for snapshot_id, delta in rows:
        newest[int(delta)] = int(snapshot_id)
    tags = delta_tags(spark, ident)
    fixed = []
    for delta, snapshot_id in sorted(newest.items()):
        if tags.get(delta) != snapshot_id:
            tag = delta_tag(delta)
            spark.sql(f"ALTER TABLE {quoted} CREATE OR REPLACE TAG `{tag}` AS OF VERSION {snapshot_id}")
            fixed.append(delta)
    return fixed
