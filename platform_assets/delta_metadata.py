"""Each delta's own metadata on its own partition, in a run that lands a range of deltas.

What flows through: a step's metadata per delta ({delta: {key: value}}), set on the
materialization of that delta's partition with Dagster's partition-scoped asset metadata
(`context.add_asset_metadata(..., partition_key=...)`, Dagster 1.13). Dagster writes one
materialization per partition of a range run, each with the step's `MaterializeResult` metadata
and then its own partition's keys over it.

Guarantees: partition N of a range run says what delta N alone did (its rows, upserts, deletes,
offsets, date), the same as a run of N alone would, so plots, freshness and row-count logic
built on the partitions are right whatever the run's size; what belongs to the run as a whole
(seconds, the span of deltas) stays on the result. A key a delta has no value for is absent from
its partition, not a copy of the range's total: the range's totals go under `range_*` keys.

The layer assets (increment, snapshot: one Iceberg table per logical table) carry a `tables`
entry, a table of the tables the delta changed (name, rows, upserts, deletes, columns): the
tables a delta leaves alone are not in it, so its size follows the delta, not the lake's width.
Each of those tables is also an external asset of its own, listed when the code location loads
(platform_assets/lake_tables.py): the catalog finds it by name and shows its columns.

Single-table assets (signal_events, changelog, a mart) also carry Dagster's table metadata:
`dagster/table_name` on their definition (the catalog names their Iceberg table) and a
`deltaport/table` tag (Dagster OSS's catalog and search find them by it: `table_tags`),
`dagster/uri` where the catalog places tables by name (hadoop, JDBC: no call to the catalog),
`dagster/column_schema` where the columns are known, `dagster/partition_row_count` on each
partition's materialization, and `dagster/row_count` (the table's live rows after the run's
commit) where the commit's summary is read anyway or in a step that is not the delta's longest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import dagster as dg

from platform_assets.deltas.partitions import partition_key


def per_delta_metadata(context: dg.AssetExecutionContext, key: dg.AssetKey,
                       by_delta: Mapping[int, Mapping[str, object]]) -> None:
    """Put `by_delta[N]` on the materialization of `key`'s partition N; call before yielding the
    `MaterializeResult` of `key`."""
    for delta, metadata in by_delta.items():
        context.add_asset_metadata(dict(metadata), asset_key=key, partition_key=partition_key(delta))



def table_metadata(table_name: str, columns: list[tuple[str, str]] | None = None, *,
                   uri: Callable[[str], str | None] | None = None) -> dict[str, object]:
    """Dagster's table metadata of a single-table asset: its Iceberg table's name and, when
    known, its columns ((name, type) pairs) and its location (`uri`: `LakeLayout.location`)."""
    out: dict[str, object] = {"dagster/table_name": table_name}
    where = uri(table_name) if uri is not None else None
    if where:
        out["dagster/uri"] = where
    if columns:
        out["dagster/column_schema"] = dg.TableSchema(columns=[dg.TableColumn(n, t) for n, t in columns])
    return out


TABLE_TAG = "deltaport/table"
# What Dagster takes as a tag's value: a longer or odder table name gets no tag (the catalog still
# names it through `dagster/table_name`; only the OSS catalog's filter by it is lost).
_TAG_VALUE = re.compile(r"[A-Za-z0-9_.\-]{1,63}")


def table_tags(table_name: str) -> dict[str, str]:
    """A single-table asset's tag naming its Iceberg table: Dagster OSS's catalog cannot filter by
    `dagster/table_name` (`table_name:` is a Dagster+ filter), but it can by tag:
    `tag:"deltaport/table"="<table>"` in its search box lists the asset."""
    return {TABLE_TAG: table_name} if _TAG_VALUE.fullmatch(table_name) else {}


TABLES_SCHEMA = dg.TableSchema(columns=[
    dg.TableColumn("table", "string", description="the Iceberg table"),
    dg.TableColumn("rows", "int", description="rows the delta changed (increment) or live rows (snapshot)"),
    dg.TableColumn("upserts", "int"), dg.TableColumn("deletes", "int"),
    dg.TableColumn("columns", "string", description="its data columns, in order")])


def tables_entry(changed: list[dict]) -> dg.TableMetadataValue:
    """The `tables` entry: one record per table the delta changed ({table, rows, upserts,
    deletes, columns}), sorted by table."""
    return dg.MetadataValue.table(records=[dg.TableRecord(dict(r)) for r in sorted(changed, key=lambda r: r["table"])],
                                  schema=TABLES_SCHEMA)


def changed_tables(applied, counts: Mapping[str, int], ident: Callable[[str], str],
                   columns: Mapping[str, str] | None = None) -> list[dict]:
    """The `tables` records of a snapshot's run: each table its commits changed (upserts or
    deletes of `applied`, the snapshot's per-table results), with its rows after the run
    (`counts`), its Iceberg identifier (`ident`) and its columns where known."""
    changed: dict[str, dict] = {}
    for a in applied:
        if getattr(a, "skipped", False) or not (a.upserts or a.deletes) or a.table not in counts:
            continue
        have = changed.setdefault(a.table, {"table": ident(a.table), "rows": counts[a.table], "upserts": 0,
                                            "deletes": 0, "columns": (columns or {}).get(a.table, "")})
        have["upserts"] += a.upserts
        have["deletes"] += a.deletes
    return list(changed.values())
