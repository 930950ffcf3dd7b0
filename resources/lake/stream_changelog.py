"""The schema changelog of a change-stream source (Qlik, DataWorks, Datastream) in the lake.

What flows through: the decoded records of one sealed delta -> rows of
`lake.<source>_meta.changelog` (partitioned by delta_num, re-landing N replaces N's rows):
- kind `schema`: a table structure the source declared (Qlik metadata message): columns with
  source types, key columns, version;
- kind `ddl`: a DDL event (DataWorks CREATE / ALTER / ...), its text;
- kind `keys`: per lake table with changes in the delta, the key columns and source column types
  its latest change carries. The snapshot takes each table's key from the latest `keys` row at or
  before its delta (`table_keys`), so a table keyed by the whole row (DataWorks without a
  primary key) or by ROWID (Datastream Oracle) is applied the way its decoder keys it.

Lake table names (`lake_table`): `<namespace>_<table>`, lower-case, any character other than
a-z, 0-9 and _ as _ (SALES.ORDER_LINES -> sales_order_lines): one Iceberg namespace per source
holds the tables of every database / schema the source carries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from resources.codecs.cdc import Change, Record, SchemaChange, TableSchema
from resources.lake.layout import LakeLayout
from resources.spark.iceberg import ensure_table, replace_deltas, table_exists

SCHEMA, DDL, KEYS = "schema", "ddl", "keys"


def lake_table(namespace: str | None, table: str) -> str:
    name = f"{namespace}_{table}" if namespace else table
    return re.sub(r"[^a-z0-9_]", "_", name.lower())


@dataclass(frozen=True)
class ChangelogEntry:
    kind: str
    table: str | None  # the lake table (None: a DDL event that names no table)
    namespace: str | None
    source_table: str | None
    key_columns: tuple[str, ...] | None
    columns: tuple[tuple[str, str], ...] | None  # (name, source type)
    version: str | None
    text: str | None
    partition: int
    offset: int


def changelog_entries(messages: Iterable[tuple[int, int, Sequence[Record]]]) -> list[ChangelogEntry]:
    """The changelog of one delta from its messages [(partition, offset, records)], in order."""
    out: list[ChangelogEntry] = []
    keys: dict[str, ChangelogEntry] = {}
    for p, o, records in messages:
        for r in records:
            if isinstance(r, TableSchema):
                out.append(ChangelogEntry(SCHEMA, lake_table(r.namespace, r.table), r.namespace, r.table,
                                          tuple(r.key_columns), tuple(r.columns),
                                          None if r.version is None else str(r.version), None, p, o))
            elif isinstance(r, SchemaChange):
                out.append(ChangelogEntry(DDL, None if r.table is None else lake_table(r.namespace, r.table),
                                          r.namespace, r.table, None, None, None, f"{r.kind}: {r.text or ''}".strip(),
                                          p, o))
            elif isinstance(r, Change):
                name = lake_table(r.namespace, r.table)
                seen = dict(keys[name].columns) if name in keys else {}
                seen.update({c: t for c, t in r.column_types.items() if t})
                keys[name] = ChangelogEntry(KEYS, name, r.namespace, r.table, tuple(r.key_columns),
                                            tuple(sorted(seen.items())), None, None, p, o)
    return out + [keys[t] for t in sorted(keys)]


def _schema():
    from pyspark.sql import types as T

    s = T.StringType()
    return T.StructType([T.StructField(n, t, True) for n, t in (
        ("delta_num", T.LongType()), ("kind", s), ("table_name", s), ("namespace", s), ("source_table", s),
        ("key_columns", T.ArrayType(s, True)), ("columns", s), ("version", s), ("text", s),
        ("_kafka_partition", T.IntegerType()), ("_kafka_offset", T.LongType()))])


def land_stream_changelog(spark, layout: LakeLayout, source: str, delta_num: int,
                          entries: Sequence[ChangelogEntry]) -> str:
    """Replace delta N's rows of the source's changelog table with `entries`; returns its name."""
    return land_stream_changelogs(spark, layout, source, {delta_num: entries})


def land_stream_changelogs(spark, layout: LakeLayout, source: str,
                           entries: Mapping[int, Sequence[ChangelogEntry]]) -> str:
    """Replace the rows of every delta in `entries` ({delta: its entries}) of the source's
    changelog table, in one commit; returns the table's name."""
    rows = [(n, e.kind, e.table, e.namespace, e.source_table,
             None if e.key_columns is None else list(e.key_columns),
             None if e.columns is None else json.dumps([list(c) for c in e.columns], ensure_ascii=False),
             e.version, e.text, e.partition, e.offset) for n, es in sorted(entries.items()) for e in es]
    ident = layout.meta(source, "changelog")
    ensure_table(spark, ident, _schema(), partition_by=["delta_num"])
    replace_deltas(spark, ident, spark.createDataFrame(rows, _schema()), list(entries))
    return ident


def table_keys(spark, layout: LakeLayout, source: str, upto: int) -> dict[str, tuple[str, ...]]:
    """{lake table: key columns} of every table with changes in deltas <= `upto` (latest wins)."""
    return keys_as_of(key_rows(spark, layout, source, upto), upto)


def key_rows(spark, layout: LakeLayout, source: str, upto: int | None = None,
             since: int | None = None) -> list[tuple[int, str, tuple[str, ...]]]:
    """(delta, lake table, key columns) of every `keys` row of the changelog (at or before `upto`;
    at or after `since`: the table is partitioned by delta, so older deltas' files are not read)."""
    from pyspark.sql import functions as F

    ident = layout.meta(source, "changelog")
    if not table_exists(spark, ident):
        return []
    spark.catalog.refreshTable(ident)
    wanted = F.col("kind") == KEYS
    if upto is not None:
        wanted &= F.col("delta_num") <= upto
    if since is not None:
        wanted &= F.col("delta_num") >= since
    return [(r.delta_num, r.table_name, tuple(r.key_columns))
            for r in spark.table(ident).where(wanted).select("delta_num", "table_name", "key_columns").collect()]


def keys_as_of(rows: Iterable[tuple[int, str, tuple[str, ...]]], upto: int) -> dict[str, tuple[str, ...]]:
    """{lake table: key columns} as of delta `upto`, from `key_rows` (the latest row <= upto wins)."""
    latest: dict[str, tuple[int, tuple[str, ...]]] = {}
    for n, table, keys in rows:
        if n <= upto and (table not in latest or n > latest[table][0]):
            latest[table] = (n, keys)
    return {t: k for t, (_, k) in sorted(latest.items())}


def changes_by_table(records: Iterable[Record]) -> dict[str, list[Change]]:
    """The row changes of `records` per lake table, in order."""
    out: dict[str, list[Change]] = {}
    for r in records:
        if isinstance(r, Change):
            out.setdefault(lake_table(r.namespace, r.table), []).append(r)
    return out

