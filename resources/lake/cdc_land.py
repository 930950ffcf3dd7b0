"""A change stream's increments in the lake: each delta's decoded changes, one commit per table, and
the manifest that says which deltas landed (the landing half of `resources/lake/cdc.py`, whose
docstring tells the whole flow; importable from there).

What flows through: `changes_frame` DataFrames of delta N -> `lake.<source>_increment.<table>`
(raw changes, `delta_num` = N) and `lake.<source>_meta.manifest` (one row per (N, table)).
Guarantees: the manifest is written last, after every table's commit was checked to hold the rows
written (`verify_committed`), so a delta in the manifest landed whole; a re-landing replaces its
deltas' partitions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from resources.codecs.cdc import BEFORE_IMAGE, DELETE, UPSERT
from resources.lake.cdc_columns import META_COLUMNS, _INCREMENT_EXTRA, CdcTypeError
from resources.lake.layout import LakeLayout
from resources.lake.side_by_side import side_by_side
from resources.lake.source_tables import _since, counted_back, verify_committed
from resources.spark.iceberg import committed_records, ensure_table, replace_deltas, table_exists
from resources.spark.unions import union_all


# --------------------------------------------------------------------------------------------
# Column types the lake already has
def increment_columns(spark, layout: LakeLayout, source: str, table: str) -> list[tuple[str, Any]]:
    """The data columns [(name, Spark DataType)] of the table's increment table ([] if none)."""
    ident = layout.increment(source, table)
    if not table_exists(spark, ident):
        return []
    spark.catalog.refreshTable(ident)
    skip = set(META_COLUMNS) | set(_INCREMENT_EXTRA)
    return [(f.name, f.dataType) for f in spark.table(ident).schema.fields if f.name not in skip]


# --------------------------------------------------------------------------------------------
# Increment


@dataclass(frozen=True)
class CdcLandStats:
    table: str
    rows: int
    upserts: int
    deletes: int
    before_images: int


def _plain_schema(fields):
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(n, t, True) for n, t in fields])


@dataclass(frozen=True)
class CdcDelta:
    """One delta for `land_cdc_increments`: {table: `changes_frame`} and its provenance."""

    delta_num: int
    frames: Mapping[str, Any]
    delta_date_us: int | None = None
    increment_id: str | None = None
    provenance: Mapping[str, object] = field(default_factory=dict)


def land_cdc_increment(spark, layout: LakeLayout, source: str, delta_num: int, frames: Mapping[str, Any], *,
                       delta_date_us: int | None = None, increment_id: str | None = None,
                       provenance: Mapping[str, object] | None = None) -> list[CdcLandStats]:
    """`land_cdc_increments` of one delta."""
    one = CdcDelta(delta_num, frames, delta_date_us, increment_id, provenance or {})
    return land_cdc_increments(spark, layout, source, [one])[delta_num]


def land_cdc_increments(spark, layout: LakeLayout, source: str, deltas: Sequence[CdcDelta], *,
                        before_manifest: Callable[[], None] | None = None) -> dict[int, list[CdcLandStats]]:
    """Replace the given deltas' rows in `lake.<source>_increment.<table>` for every table of
    their `frames`, one commit per table for all of them, then record the deltas in
    `lake.<source>_meta.manifest` (one row per delta and table, one commit, written last, so
    "delta N landed" is never claimed early). Returns {delta: stats per table}.

    Increment tables are partitioned by `delta_num` (re-landing N replaces exactly N's rows)
    and carry `delta_date` (the delta's watermark time when given, else NULL). A table whose
    columns grew gets the new columns (older rows read NULL); `ensure_table` refuses type
    changes it cannot widen. The manifest has Prostore's columns (so `prostore.landed_deltas`
    reads it too) plus `before_images`. Each delta's frame is counted by operation while the
    write reads it (an observation per frame); each table's commit must then hold exactly the
    rows counted (its summary's ``added-records``), or `IncrementNotLandedError` is raised
    before the manifest: the returned stats are what landed, with no scan of the tables. A
    delta is immutable: re-landing N is expected to bring the same tables (a table left out
    keeps its earlier rows of N). `before_manifest` is called once every table has committed
    and been verified, before the manifest: what it raises leaves the deltas unrecorded (the
    caller's own condition for "landed", e.g. the changelog of the same deltas committed)."""
    deltas = sorted(deltas, key=lambda d: d.delta_num)
    ids = {d.delta_num: d.increment_id or f"{source}:{d.delta_num}" for d in deltas}
    tables = sorted({t for d in deltas for t in d.frames})
    # Side by side, as the writes: a source's first delta creates every table it names (a CREATE
    # TABLE each, mostly waiting on the catalog), which another table's can overlap.
    staged = dict(zip(tables, side_by_side(_stage_table, [(spark, layout, source, t, deltas) for t in tables])))
    stats, rows_sent, commits = _write_tables(spark, layout, source, deltas, ids, staged)
    verify_committed(source, [d.delta_num for d in deltas], rows_sent, committed_records(spark, commits))
    if before_manifest is not None:
        before_manifest()
    _record_manifest(spark, layout, source, deltas, ids, stats)
    return stats


@dataclass
class _StagedTable:
    """One table's frame to write for all the deltas that have it, and its rows counted per delta."""

    frame: Any
    deltas: list[int]
    observed: dict[int, Any]  # delta -> the Observation counting its rows as the write reads them


def _stage_table(spark, layout: LakeLayout, source: str, table: str, deltas: Sequence[CdcDelta]) -> _StagedTable:
    """The table's frames of `deltas` (in delta order) aligned to its increment table's columns, which
    are created or grown first, and one union; each delta's frame observed (counted by operation)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    ident = layout.increment(source, table)
    parts, struct, landed, observed = [], None, [], {}
    for d in deltas:  # in delta order: the table's columns grow as the changes did
        frame = d.frames.get(table)
        if frame is None:
            continue
        missing = [c for c in ("_op", "_order", "_event_id", "_captured") if c not in frame.columns]
        if missing:
            raise CdcTypeError(f"{source}.{table}: the frame lacks {missing}: build it with changes_frame")
        date = (F.timestamp_micros(F.lit(d.delta_date_us)) if d.delta_date_us is not None else F.lit(None))
        frame = (frame.withColumn("delta_num", F.lit(d.delta_num).cast("long"))
                 .withColumn("delta_date", date.cast("timestamp_ntz")))
        if frame.schema != struct:  # one schema round trip per table unless the columns changed
            struct = frame.schema
            ensure_table(spark, ident, _plain_schema([(f.name, f.dataType) for f in struct.fields]),
                         partition_by=["delta_num"])
        # Counted as the write reads it: no job of its own, no second evaluation.
        observed[d.delta_num] = seen = Observation(f"deltaport_cdc_increment_{uuid.uuid4().hex}")
        parts.append(frame.observe(seen, F.count(F.lit(1)).alias("rows"),
                                   *[F.count_if(F.col("_op") == op).alias(op) for op in _OPS]))
        landed.append(d.delta_num)
    have = spark.table(ident).schema

    def aligned(frame):
        given = {c.lower(): c for c in frame.columns}
        return frame.select(*[(F.col(f"`{given[f.name.lower()]}`") if f.name.lower() in given
                               else F.lit(None)).cast(f.dataType).alias(f.name) for f in have.fields])

    return _StagedTable(union_all([aligned(f) for f in parts], by_name=True), landed, observed)


def _write_tables(spark, layout: LakeLayout, source: str, deltas: Sequence[CdcDelta], ids: Mapping[int, str],
                  staged: Mapping[str, _StagedTable]):
    """Commit every staged table (side by side); returns (stats per delta, rows sent per table, commits)."""
    stats: dict[int, list[CdcLandStats]] = {d.delta_num: [] for d in deltas}
    commits: dict[str, str] = {}
    rows_sent: dict[str, int] = {}

    def write(table: str, one: _StagedTable) -> str:
        # No tag: increments are read by their delta_num column, never by time travel.
        increment_ids = ",".join(ids[n] for n in one.deltas)
        return replace_deltas(spark, layout.increment(source, table), one.frame, one.deltas,
                              extra_summary={"deltaport.increment-id": increment_ids})

    # The tables go side by side, as a datamart's do (`land_increment_tables`): each write mostly
    # waits on the server (its rows converted on the driver, its commit), which another overlaps.
    for (table, one), commit in zip(staged.items(), side_by_side(write, list(staged.items()))):
        ident = layout.increment(source, table)
        commits[ident] = commit
        for n in one.deltas:
            got = one.observed[n].get
            if "rows" not in got:
                # The write committed but its observation never reached the client (seen once, on a
                # standalone cluster under load: an empty dict). The rows are counted back instead.
                got = counted_back(spark, ident, n, "_op", {op: op for op in _OPS})
            stats[n].append(CdcLandStats(table, int(got["rows"]), int(got[UPSERT]), int(got[DELETE]),
                                         int(got[BEFORE_IMAGE])))
            rows_sent[ident] = rows_sent.get(ident, 0) + int(got["rows"])
    return stats, rows_sent, commits


def _record_manifest(spark, layout: LakeLayout, source: str, deltas: Sequence[CdcDelta], ids: Mapping[int, str],
                     stats: Mapping[int, list[CdcLandStats]]) -> None:
    """The manifest's rows of `deltas` (one per delta and table; a delta with no table gets one row
    with no table), replacing those deltas' partitions in one commit."""
    from pyspark.sql.types import LongType

    schema = _plain_schema([("delta_num", LongType()), ("table_name", _string()), ("rows", LongType()),
                            ("upserts", LongType()), ("deletes", LongType()), ("increment_id", _string()),
                            ("delta_date_us", LongType()), ("provenance", _string()),
                            ("before_images", LongType())])
    rows = []
    for d in deltas:
        n, prov = d.delta_num, json.dumps(dict(d.provenance), sort_keys=True, default=str)
        rows += [(n, s.table, s.rows, s.upserts, s.deletes, ids[n], d.delta_date_us, prov, s.before_images)
                 for s in stats[n]] or [(n, None, 0, 0, 0, ids[n], d.delta_date_us, prov, 0)]
    ident = layout.meta(source, "manifest")
    ensure_table(spark, ident, schema, partition_by=["delta_num"])
    # read by delta_num, never by tag
    replace_deltas(spark, ident, spark.createDataFrame(rows, schema), [d.delta_num for d in deltas])


_OPS = (UPSERT, DELETE, BEFORE_IMAGE)


def _string():
    from pyspark.sql.types import StringType

    return StringType()


def cdc_landed_deltas(spark, layout: LakeLayout, source: str,
                      since: int | None = None) -> dict[int, dict[str, CdcLandStats]]:
    """{delta: {table: stats}} of every increment recorded in the source's manifest; with
    `since`, of the deltas >= since only (the manifest is partitioned by delta: older deltas'
    files are not read, so the cost does not grow with the lake's age)."""
    ident = layout.meta(source, "manifest")
    if not table_exists(spark, ident):
        return {}
    spark.catalog.refreshTable(ident)
    out: dict[int, dict[str, CdcLandStats]] = {}
    for r in _since(spark.table(ident), since).collect():
        tables = out.setdefault(r.delta_num, {})
        if r.table_name is not None:
            tables[r.table_name] = CdcLandStats(r.table_name, r.rows, r.upserts, r.deletes, r.before_images or 0)
    return out
