"""A change stream's deltas (Qlik, DataWorks, Datastream), read back from the lake as a Prostore
datamart's BACKUP_TO_KAFKA increments (`deltaport export` of a stream source).

What flows through: for each delta N of the stream source, the state of every table right after
N and right after N-1 (the stream's own snapshots, as `resources/lake/as_of.py` resolves them: a
delta that left a table alone has no tag of it) become Prostore's increment
of N: every row that is new or changed at N with `sys_op = 0` (the whole row, as a Prostore
increment holds one version per row per delta), every key live at N-1 and gone at N with
`sys_op = 1`; and the changelog as Prostore DDL: a CREATE TABLE per table the first time it has
a state, an ALTER TABLE ... ADD COLUMN per column added later.

Why states and not the raw changes: a stream's increment holds every change of a key in the
delta, unordered (Datastream), partial (Qlik columnMask), with duplicates and before-images; a
Prostore increment holds one version per row and RESTORE applies it as it is. The difference of
the stream's own snapshots is exactly what a reader of the increments must reach.

Types (seed 001's DDL types; `resources/codecs/types.py`): bigint <- long; int32 <- int, short,
byte; boolean; float; double; varchar <- string; date; timestamp <- timestamp (UTC) and
timestamp_ntz. Prostore has no decimal and no binary type: a decimal column is exported as
varchar holding its exact text (12.50), a binary one as varchar holding lower-case hex; a stream
TIME column is already bigint microseconds in the lake and stays bigint. Keys (the lake's own
snapshot key, `stream_changelog.table_keys`) are the PRIMARY KEY and their first column the
DISTRIBUTED BY. A column whose type changes, or a table whose key changes, cannot be described
to Prostore by ADD COLUMN and is refused (`ExportError`) rather than exported wrong.
"""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal

from resources.codecs.backup import ChangelogRecord
from resources.codecs.backup_writer import BackupWriteOptions, TableChanges, encode_increment
from resources.codecs.types import Column
from resources.lake.cdc import SNAPSHOT_COLUMNS, cdc_landed_deltas, cdc_recorded_deltas, cdc_snapshot_as_of
from resources.lake.export import ExportedDelta, ExportError
from resources.lake.history_read import read_mark
from resources.lake.layout import LakeLayout
from resources.lake.stream_changelog import key_rows, keys_as_of

_PLAIN = re.compile(r"^[a-z_][a-z0-9_]*$")


def prostore_type(spark_type) -> str:
    """The Prostore DDL type a lake column of this Spark type is exported as."""
    from pyspark.sql import types as T

    for cls, name in ((T.LongType, "bigint"), (T.IntegerType, "int32"), (T.ShortType, "int32"),
                      (T.ByteType, "int32"), (T.BooleanType, "boolean"), (T.FloatType, "float"),
                      (T.DoubleType, "double"), (T.StringType, "varchar"), (T.DateType, "date"),
                      (T.TimestampType, "timestamp"), (T.TimestampNTZType, "timestamp"),
                      (T.DecimalType, "varchar"), (T.BinaryType, "varchar")):
        if isinstance(spark_type, cls):
            return name
    raise ExportError(f"no Prostore type for a {spark_type.simpleString()} column")


def prostore_value(spark_type, value):
    """A lake value as the exported column holds it (decimal text, binary hex, UTC timestamps)."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(spark_type, T.DecimalType):
        return format(value, "f") if isinstance(value, Decimal) else str(value)
    if isinstance(spark_type, T.BinaryType):
        return bytes(value).hex()
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def quote(name: str) -> str:
    """An identifier as Prostore DDL writes it: bare when lower-case plain, else double-quoted."""
    return name if _PLAIN.match(name) else '"' + name.replace('"', '""') + '"'


def create_table(datamart: str, table: str, columns: Sequence[Column], keys: Sequence[str]) -> str:
    cols = ", ".join(f"{quote(c.name)} {c.type}{'' if c.nullable else ' NOT NULL'}" for c in columns)
    pk = ", ".join(quote(k) for k in keys)
    return (f"CREATE TABLE {datamart}.{quote(table)} ({cols}, PRIMARY KEY ({pk})) "
            f"DISTRIBUTED BY ({quote(keys[0])})")


class StreamChangelog:
    """The Prostore changelog of an exported stream, grown delta by delta (records never change)."""

    def __init__(self, datamart: str):
        self.datamart = datamart
        self.records: list[ChangelogRecord] = []
        self.tables: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}  # table -> ({column: type}, keys)

    def describe(self, table: str, columns: Sequence[Column], keys: Sequence[str]) -> None:
        """Record `table` with these columns and keys (CREATE, or ADD COLUMN for new columns)."""
        keys = tuple(keys)
        if table not in self.tables:
            self._add(table, create_table(self.datamart, table, columns, keys))
            self.tables[table] = ({c.name: c.type for c in columns}, keys)
            return
        known, known_keys = self.tables[table]
        if keys != known_keys:
            raise ExportError(f"table {table!r}: its key changed from {list(known_keys)} to {list(keys)}; "
                              "Prostore DDL cannot change a primary key")
        for c in columns:
            if c.name not in known:
                self._add(table, f"ALTER TABLE {self.datamart}.{quote(table)} ADD COLUMN {quote(c.name)} {c.type}")
                known[c.name] = c.type
            elif known[c.name] != c.type:
                raise ExportError(f"table {table!r} column {c.name!r}: type changed from {known[c.name]} to "
                                  f"{c.type}; Prostore DDL cannot retype a column")

    def _add(self, table: str, query: str) -> None:
        self.records.append(ChangelogRecord(len(self.records), table, query))


def export_stream(spark, layout: LakeLayout, source: str, deltas: Sequence[int],
                  options: BackupWriteOptions = BackupWriteOptions(), *, as_datamart: str | None = None,
                  new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
                  snapshot: bool = False, landed: Mapping[int, object] | None = None) -> Iterator[ExportedDelta]:
    """Each delta of `deltas` (landed and applied, in order) as a Prostore increment. The
    changelog is built from the source's first delta, so it is the same whatever range is asked.

    `snapshot`: a snapshot backup instead: the first of `deltas` as delta 0 holding its whole
    state (sys_op 0), the others renumbered 1, 2, ... (seed 001 lines 118-124). `landed`:
    `cdc_landed_deltas` when the caller has read it already."""
    name = as_datamart or source
    landed = cdc_landed_deltas(spark, layout, source) if landed is None else landed
    missing = [n for n in deltas if n not in landed]
    if missing:
        raise ExportError(f"stream {source!r}: delta(s) {missing} are not in the lake (landed: {sorted(landed)})")
    tables = [t.tableName for t in spark.sql(f"SHOW TABLES IN {layout.catalog}.{source}").collect()]
    mark = read_mark(spark, layout, source)  # once for every table and delta
    # Every delta from a table's first to the source's landed one, those that left it alone too
    # (they have no tag): a snapshot export starting at one must hold the table's whole state.
    recorded = {t: cdc_recorded_deltas(spark, layout.snapshot(source, t), mark=mark) for t in tables}
    key_history = key_rows(spark, layout, source)
    changelog = StreamChangelog(name)
    wanted = set(deltas)
    date = int(time.time() * 1_000_000)  # a stream delta has no close time: the export's
    for n in sorted(d for d in landed if d <= max(deltas, default=-1)):
        keys = keys_as_of(key_history, n)
        parts = {}
        for table in sorted(t for t in tables if n in recorded[t]):
            if table not in keys:
                raise ExportError(f"stream {source!r} table {table!r}: no key recorded up to delta {n}")
            now = cdc_snapshot_as_of(spark, layout, source, table, n, mark=mark)
            fields = [f for f in now.schema.fields if f.name not in SNAPSHOT_COLUMNS]
            columns = [Column(f.name, prostore_type(f.dataType), nullable=f.name not in keys[table]) for f in fields]
            changelog.describe(table, columns, keys[table])
            if n in wanted:
                state = snapshot and n == min(deltas)
                parts[table] = TableChanges(columns, _changes(spark, layout, source, table, now,
                                                              None if state else _before(recorded[table], n), fields,
                                                              keys[table], mark=mark))
        if n in wanted:
            parts = {t: p for t, p in parts.items() if p.rows}
            number = n - min(deltas) if snapshot else n
            yield ExportedDelta(number, n, encode_increment(name, number, date, new_id(), list(changelog.records), parts,
                                                            options),
                                sum(len(p.rows) for p in parts.values()))


def _before(recorded, n: int) -> int | None:
    """The table's delta before n (None: n is its first)."""
    return max((d for d in recorded if d < n), default=None)


def _changes(spark, layout, source, table, now, before: int | None, fields, keys, *, mark=None) -> list[dict]:
    """Rows new or changed in the table's state `now` (sys_op 0) and keys gone since delta
    `before` (sys_op 1); with no `before`, the whole state."""
    from pyspark.sql import functions as F

    def live(df):
        df = df.where(~F.coalesce(F.col("_tombstone"), F.lit(False)))
        have = set(df.columns)
        return df.select(*[(F.col(f"`{f.name}`") if f.name in have else F.lit(None).cast(f.dataType)).alias(f.name)
                           for f in fields])

    current = live(now)
    if before is not None:
        prev = live(cdc_snapshot_as_of(spark, layout, source, table, before, mark=mark))
        upserts = current.exceptAll(prev)
        deletes = prev.join(current.select(*[F.col(f"`{k}`") for k in keys]), on=list(keys), how="left_anti")
    else:
        upserts, deletes = current, None
    types = {f.name: f.dataType for f in fields}

    def rows(df, sys_op):
        return [{c: prostore_value(types[c], v) for c, v in r.items()} | {"sys_op": sys_op}
                for r in df.toArrow().to_pylist()]

    return rows(upserts, 0) + (rows(deletes.select(*[f"`{f.name}`" for f in fields]), 1) if deletes is not None else [])
