"""Qlik, DataWorks and Datastream changes in the Iceberg lake: increments and order-aware snapshots.

Data flow, per source (`source` plays the part a datamart plays for Prostore; same `LakeLayout`):
    decoded `Change`s of delta N ──changes_frame──► one DataFrame per table
        ──land_cdc_increment──► lake.<source>_increment.<table>   (raw changes, delta_num = N)
                                lake.<source>_meta.manifest        (one row per (N, table))
        ──apply_cdc_snapshot──► lake.<source>_history.<table>     (versions N closes, first: stream_history.py)
                                lake.<source>.<table>             (state after N, tag delta_<N>)
    cdc_rows_as_of(N) reads the state back (tombstones and `_` columns left out); a range of
    deltas (apply_cdc_through) folds into one commit per table, read back as of any N inside.

Why not Prostore's `merge_upserts`: these streams are not closed, ordered slices. Delivery is
at least once, Datastream events arrive in any order (backfill reads in particular), and a Qlik
UPDATE may carry only some columns (columnMask). So every row change carries its source's own
order (`_order`, `order_key_text` of `Change.order_key`) and the snapshot applies by it:

- duplicates (same `_event_id`; the order key when a format gives no id) count once;
- BEFORE_IMAGE changes (an update's old row) land in the increment for audit, never in state;
- per key, the delta's changes fold in `_order` order: the last change decides upsert or
  delete; an upserted column takes the value of the latest change after the key's last delete
  that captured it (`_captured`, NULL = every column), a column no such change captured keeps
  the stored value (NULL when the delta deleted the key first, or the row was a tombstone);
- the snapshot keeps per row `_order` (of the last applied change), `_event_time_us` and
  `_tombstone`: a delete leaves a tombstone (key + `_order`, other columns NULL), so an older
  change arriving later (a late duplicate, a shuffled backfill read) cannot bring the row back.
  (Not `_deleted`: Iceberg reserves that name for a metadata column, and MERGE refuses a table
  that has a column of that name);
- a change whose `_order` is not above the row's stored `_order` is dropped before the fold, so
  a late change never overwrites a newer value, not even in one column;
- one MERGE = one Iceberg commit records delta N (summary `deltaport.delta`, tag `delta_<N>`)
  and the key columns it applied by (`deltaport.keys.<namespace>.<table>`, keyed by the table:
  `session_properties.own_property`; the next run's key, stream_keys.py);
  a snapshot already at N or later skips N (re-running is a no-op), one behind an earlier
  delta with changes of it refuses (`UnappliedDeltasError`). A delta commits only to the tables
  it changes (issue 57): one with no change of the table records nothing (no commit, no tag:
  readers resolve "as of N" through the source's landed mark, `resources/lake/as_of.py`), and a
  table is not made until its first change; one whose changes were all duplicates or late
  records nothing either, unless its key columns are not those the table's newest commit
  records (an empty commit records them);
- a range run's deltas a..b fold into ONE MERGE per table (`resources/lake/cdc_fold.py`: the
  state applying them in turn gives, late changes across deltas included), recording them all
  (`deltaport.deltas=a-b`) and tagged `delta_<b>`; a delta
  inside reads back as the state before the fold with the fold's deltas up to it applied by the
  same rules (`cdc_snapshot_as_of`). A fold's deltas are cut to those from the first to the
  last with changes of the table (`changed_span`): those around them left it alone.

Convergence (why arrival order does not matter): for whole-row changes (Datastream, DataWorks,
Qlik INSERT and full load) max order per key with tombstones is a last-writer-wins register:
the same set of changes gives the same state for any split into deltas and any order inside
them. Datastream sorts backfill reads below every CDC event (resources/codecs/datastream.py), Qlik
full-load rows below every changeSequence, so the newest CDC change of a key always wins. A
partial change (Qlik columnMask) older than the row's stored order is dropped whole, not
merged column by column: exact for Qlik, which delivers in changeSequence order (only
re-delivered duplicates come late, and those are already applied).

Python values -> Spark types (`infer_columns`): a column keeps the type the lake already has
for it, else takes the one its source declares (`Change.column_types`: Qlik NUMERIC(12,2),
DataWorks LONG, Avro long, ...), as long as every value fits; else its values decide: bool
boolean; int bigint (beyond 64 bits decimal(38,0) or wider scale); float double; Decimal
decimal(p,s) wide enough for the values; str string; bytes binary; datetime (naive UTC)
timestamp_ntz; date date; time bigint microseconds since midnight (Iceberg's Spark runtime
cannot write `time`, as for Prostore); a column holding only NULLs string. int mixed with float
is double, int mixed with Decimal is decimal; other mixes are refused (`CdcTypeError`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from resources.codecs.cdc import DELETE, UPSERT
from resources.errors import DeltaportError
from resources.failpoints import failpoint
from resources.lake.cdc_columns import (  # shaped there; landed and applied here (and importable from here)
    KEYS_PROPERTY,
    META_COLUMNS,
    SNAPSHOT_COLUMNS,
    CdcTypeError,
    changes_frame,
    check_landable,
    infer_columns,
    order_key_text,
)
from resources.lake.cdc_fold import fold_changes, stored_of_changes
from resources.lake.cdc_land import (  # landed there; importable from here
    CdcDelta, CdcLandStats, _plain_schema, cdc_landed_deltas, increment_columns, land_cdc_increment, land_cdc_increments)
from resources.lake.cdc_merge import merge_folded
from resources.lake.cdc_read import cdc_columns_as_of, cdc_recorded_deltas, cdc_rows_as_of, cdc_snapshot_as_of
from resources.lake.landed_mark import mark_landed
from resources.lake.layout import LakeLayout
from resources.lake.source_tables import SNAPSHOT_TABLE_PROPERTIES, MissingDeltasError
from resources.lake.prostore_history import mark_history_start, version_fields
from resources.lake.side_by_side import side_by_side
from resources.lake.versions_view import follow_columns
from resources.lake.stream_history import stream_table_properties, write_stream_history
from resources.spark.iceberg import (
    commit_delta,
    ensure_table,
    metadata_table,
    table_exists,
)
from resources.spark.iceberg_reads import (
    TOMBSTONES_PROPERTY,
    last_applied_delta,
    live_rows,
    recorded_property_sql,
    writer_progress,
)

from resources.spark.iceberg import _col as _q
from resources.spark.session import local_checkpoint
from resources.spark.iceberg_merge import narrow_to_changed_keys
from resources.spark.merge_keys import PRUNING_KEYS
from resources.spark.table_properties import ensure_properties
from resources.spark.session_properties import own_property

__all__ = [
    "CdcApplied",
    "CdcLandStats",
    "CdcTypeError",
    "KEYS_PROPERTY",
    "META_COLUMNS",
    "SNAPSHOT_COLUMNS",
    "UnappliedDeltasError",
    "apply_cdc_snapshot",
    "apply_cdc_through",
    "cdc_columns_as_of",
    "cdc_landed_deltas",
    "cdc_recorded_deltas",
    "cdc_rows_as_of",
    "cdc_snapshot_as_of",
    "changes_frame",
    "check_landable",
    "increment_columns",
    "infer_columns",
    "land_cdc_increment",
    "land_cdc_increments",
    "CdcDelta",
    "lowest_applied",
    "order_key_text",
]


class UnappliedDeltasError(DeltaportError):
    """A snapshot cannot take delta N: earlier landed deltas have not been applied to it yet."""

    def __init__(self, ident: str, target: int, missing: Sequence[int]):
        self.missing = list(missing)
        super().__init__(f"{ident}: cannot apply delta {target} before delta(s) "
                         f"{', '.join(map(str, missing))}; apply them first, in order")


# --------------------------------------------------------------------------------------------
# Snapshot


@dataclass(frozen=True)
class CdcApplied:
    delta_num: int
    table: str
    skipped: bool  # the snapshot had applied this delta (or a later one) already
    events: int = 0  # distinct changes applied (duplicates, before-images and late changes left out)
    upserts: int = 0  # keys whose last change in the delta is an upsert
    deletes: int = 0  # keys left as tombstones by the delta
    live_rows: int | None = None  # the table's live rows after the commit (tombstones left out), when known


def apply_cdc_snapshot(spark, layout: LakeLayout, source: str, delta_num: int, table: str,
                       key_columns: Sequence[str], columns: Sequence[tuple[str, Any]] | None = None, *,
                       keep_history: bool = True) -> CdcApplied:
    """Take `lake.<source>.<table>` from state N-1 to state N in ONE Iceberg commit (module
    docstring: dedupe, drop before-images, drop stale changes, fold per key, MERGE), recording
    delta N in the summary and tagging it `delta_<N>` (no change: nothing is written).

    `columns`: the snapshot's data columns [(name, Spark DataType)] (default: the increment
    table's); new ones are added to an existing snapshot. Skips (returns `skipped=True`) when
    the snapshot has applied N or a later delta. Raises `MissingDeltasError` when N (or a delta
    between the snapshot's last and N) has not landed, `UnappliedDeltasError` when a delta
    between the snapshot's last (or, for a new one, any earlier one) has changes of the table; nothing
    is written then. `keep_history`: the versions the delta closes go to the history table first
    (resources/lake/stream_history.py)."""
    landed = cdc_landed_deltas(spark, layout, source)
    ident = layout.snapshot(source, table)
    last = last_applied_delta(spark, ident) if table_exists(spark, ident) else None
    return _apply(spark, layout, source, [delta_num], table, key_columns, columns, landed, last,
                  keep_history=keep_history)[0]


def _apply(spark, layout: LakeLayout, source: str, deltas: Sequence[int], table: str, key_columns: Sequence[str],
           columns: Sequence[tuple[str, Any]] | None, landed: Mapping[int, Mapping[str, CdcLandStats]],
           last: int | None, commit_id: str | None = None, keep_history: bool = True, *,
           tombstones: int | None = None) -> list[CdcApplied]:
    """`apply_cdc_snapshot` of consecutive `deltas` in one commit, given the manifest and the
    snapshot's last applied delta: one delta as that function says; several fold into one
    MERGE (`resources/lake/cdc_fold.py`: the same state as applying them in turn) recording
    them all (``deltaport.deltas``, the key columns in ``deltaport.keys``), tagged with the
    last; `cdc_snapshot_as_of` reads the states between. One `CdcApplied` per delta (a fold's
    counts on its last). `commit_id`: the id its commit records (default: a new one); tables
    applied side by side share one, so their MERGEs share the session's commit properties.
    `tombstones`: the table's tombstones now, as its newest commit records them (None: not
    known; a MERGE then counts them first, one scan of the table's `_tombstone` column).

    Each commit records the table's tombstones after it (`TOMBSTONES_PROPERTY`): the ones before
    it, plus the keys the fold leaves deleted, minus the folded keys whose stored row was one
    (every folded key's change is newer than its stored row, so the MERGE applies it). With
    the summary's rows that gives the live rows without a scan (`CdcApplied.live_rows`)."""
    keys = list(key_columns)
    done = _nothing_to_apply(layout, source, table, keys, deltas, landed, last)
    if done is not None:
        return done
    snap = _snapshot_table(spark, layout, source, table, keys, columns, deltas, keep_history, tombstones)
    unchanged = [CdcApplied(n, table, skipped=False) for n in deltas]
    fold = _fold(spark, snap, table, keys, deltas, landed, keep_history)
    if not fold.counts:  # every change was a duplicate, late or a before-image: the state stays as it is
        _record_keys_only(spark, snap, keys, deltas[-1])
        return unchanged
    return [*unchanged[:-1], _commit_fold(spark, layout, source, table, snap, fold, keys, deltas, commit_id,
                                          keep_history)]


def _nothing_to_apply(layout: LakeLayout, source: str, table: str, keys: list[str], deltas: Sequence[int],
                      landed: Mapping[int, Mapping[str, CdcLandStats]], last: int | None) -> list[CdcApplied] | None:
    """What `_apply` returns without touching the table (applied already, or no delta changes
    it), or None: it has work. Raises when the deltas cannot be applied (no key, not landed, an
    earlier delta with changes of the table not applied yet)."""
    delta_num, first = deltas[-1], deltas[0]
    if not keys:
        raise DeltaportError(f"{source}.{table}: no key columns: changes of a table without a key cannot be "
                             "applied to a snapshot")
    not_landed = [n for n in deltas if n not in landed]
    if not_landed:
        raise MissingDeltasError(source, delta_num, not_landed, kind="change stream")
    if last is not None and last >= delta_num:
        return [CdcApplied(n, table, skipped=True) for n in deltas]
    # A delta commits only to the tables it changes (issue 57): a table's last applied delta may
    # be far below `first`; only a delta in between with changes of it is one it still needs.
    between = range(last + 1, first) if last is not None else [n for n in landed if n < first]
    not_landed = [n for n in between if n not in landed] if last is not None else []
    if not_landed:
        raise MissingDeltasError(source, delta_num, not_landed, kind="change stream")
    behind = sorted(n for n in between if not _untouched_by(landed, table, [n]))
    if behind:
        raise UnappliedDeltasError(layout.snapshot(source, table), first, behind)
    if _untouched_by(landed, table, deltas):
        # The manifest (written after the increment commits) says none of these deltas changed
        # the table: nothing records them (no commit, no tag; readers resolve "as of N" through
        # the source's landed mark, resources/lake/as_of.py), and a table with no change yet is
        # not made until its first one.
        return [CdcApplied(n, table, skipped=False) for n in deltas]
    return None


@dataclass
class _Snapshot:
    """A stream table's snapshot as `_apply` found (or made) it, and its increment table."""
    ident: str
    increment: str
    frame: Any  # the snapshot table's DataFrame
    types: dict
    data: list[str]  # the data columns
    created: bool
    tombstones: int | None


def _snapshot_table(spark, layout: LakeLayout, source: str, table: str, keys: list[str],
                    columns: Sequence[tuple[str, Any]] | None, deltas: Sequence[int], keep_history: bool,
                    tombstones: int | None) -> _Snapshot:
    """The snapshot table with every column of the increment's (created or widened here)."""
    from pyspark.sql import types as T

    ident, inc_ident = layout.snapshot(source, table), layout.increment(source, table)
    has_increment = table_exists(spark, inc_ident)
    if has_increment:
        spark.catalog.refreshTable(inc_ident)
    if columns is None:
        if not has_increment:
            raise DeltaportError(f"{inc_ident} does not exist: pass the table's columns")
        columns = increment_columns(spark, layout, source, table)
    data = [n for n, _ in columns]
    missing_keys = [k for k in keys if k not in data]
    if missing_keys:
        raise DeltaportError(f"{source}.{table}: key column(s) {missing_keys} are not among the columns {data}")
    schema = _plain_schema([*columns, ("_order", T.StringType()), ("_tombstone", T.BooleanType()),
                            ("_event_time_us", T.LongType()), *version_fields()])
    ensured = ensure_table(spark, ident, schema, properties=stream_table_properties(keep_history, deltas[0]))
    if ensured.created:
        tombstones = 0
    if ensured.changed:
        follow_columns(spark, layout, source, table, keep_history=keep_history, stream=True)
    if not ensured.created:  # a table from before stream snapshots were merge-on-read
        ensure_properties(spark, ident, SNAPSHOT_TABLE_PROPERTIES)
    spark.catalog.refreshTable(ident)
    target = spark.table(ident)
    if not has_increment:  # the manifest counts changes its increment table does not have
        raise DeltaportError(f"{inc_ident} does not exist, but the manifest has changes of {table} in deltas "
                             f"{deltas[0]}-{deltas[-1]}")
    return _Snapshot(ident, inc_ident, target, {f.name: f.dataType for f in target.schema.fields}, data,
                     ensured.created, tombstones)


@dataclass
class _Fold:
    """The deltas' net change per key (`cdc_fold.fold_changes`), checkpointed, with its counts."""
    folded: Any
    counts: dict  # {op: (keys, events)}
    were_tombstones: int
    before: Any  # the stored rows of the changes' keys (the history reads them)
    changes: Any
    rows: int  # the deltas' change rows, as the manifest counts them
    narrowed: str | None  # the MERGE's key filter, when short enough to prune the scan


def _fold(spark, snap: _Snapshot, table: str, keys: list[str], deltas: Sequence[int],
          landed: Mapping[int, Mapping[str, CdcLandStats]], keep_history: bool) -> _Fold:
    from pyspark.sql import functions as F

    first, delta_num = deltas[0], deltas[-1]
    changes = spark.table(snap.increment).where(F.col("delta_num").between(first, delta_num))
    rows = sum(landed[n][table].rows for n in deltas if landed[n].get(table) is not None)
    before = snap.frame  # the fold and the history read the stored rows of the changes' keys only: once
    narrowed = None
    if keep_history and not snap.created:
        # A short key list prunes the scan's row groups too (merge_keys.py) and serves the MERGE;
        # a longer one is left to the MERGE, which works out its own from the folded keys.
        if rows <= PRUNING_KEYS:
            narrowed = narrow_to_changed_keys(spark, snap.ident, changes.select(*[_q(k) for k in keys]), keys,
                                              rows=rows, null_safe=True).text
        scanned = snap.frame.alias("t").where(F.expr(narrowed)) if narrowed else snap.frame
        before = stored_of_changes(changes, scanned, keys, changes_rows=rows) or snap.frame
    folded = fold_changes(changes, before, keys, snap.data, snap.types, several_deltas=len(deltas) > 1,
                          changes_rows=rows)
    # localCheckpoint: Spark 4.1 cannot plan a MERGE whose source still reads another Iceberg
    # table ("No plan for TableReference"); the deltas' net changes are small.
    folded = local_checkpoint(folded)
    per_op = {r["_op"]: r for r in folded.groupBy("_op").agg(
        F.count(F.lit(1)).alias("keys"), F.sum("__dp_events").alias("events"),
        F.count(F.when(F.col("__dp_was_tomb"), 1)).alias("were_tombstones")).collect()}
    return _Fold(folded, {op: (r["keys"], r["events"]) for op, r in per_op.items()},
                 sum(r["were_tombstones"] for r in per_op.values()), before, changes, rows, narrowed)


def _record_keys_only(spark, snap: _Snapshot, keys: list[str], delta_num: int) -> None:
    """Deltas whose changes left the state as it was: nothing to record, unless the table is new
    or the key columns the changes carry are not those its newest commit records
    (`resources/lake/stream_keys.py` reads them back): then the last delta's empty commit records
    them, as a MERGE's would."""
    if snap.created or _recorded_keys(spark, snap.ident) != tuple(keys):
        commit_delta(spark, snap.ident, spark.createDataFrame([], snap.frame.schema), delta_num=delta_num,
                     mode="append", extra_summary={own_property(KEYS_PROPERTY, snap.ident): json.dumps(keys),
                                                   **({} if snap.tombstones is None else
                                                      {own_property(TOMBSTONES_PROPERTY, snap.ident):
                                                       str(snap.tombstones)})})


def _commit_fold(spark, layout: LakeLayout, source: str, table: str, snap: _Snapshot, fold: _Fold,
                 keys: list[str], deltas: Sequence[int], commit_id: str | None, keep_history: bool) -> CdcApplied:
    """The history of the versions the fold closes, then its MERGE: one commit for `deltas`."""
    from pyspark.sql import functions as F

    counts = fold.counts
    tombstones = snap.tombstones
    if tombstones is None:  # a table whose commits do not record them yet (made by an older deltaport)
        tombstones = snap.frame.where(F.col("_tombstone")).count()
    tombstones += counts.get(DELETE, (0, 0))[0] - fold.were_tombstones
    if not snap.created:
        mark_history_start(spark, snap.ident, deltas[0], keep_history)
    changed_keys = sum(k for k, _ in counts.values())
    if keep_history:  # before the MERGE, from the state it has not touched yet
        write_stream_history(spark, layout, source, table, fold.before, keys, deltas, folded=fold.folded,
                             changes=fold.changes, folded_rows=changed_keys, changes_rows=fold.rows)
    commit = merge_folded(spark, snap.ident, fold.folded, keys, snap.data, deltas, commit_id or uuid.uuid4().hex,
                          changes_rows=changed_keys, tombstones=tombstones, key_filter=fold.narrowed)
    rows = live_rows(commit.summary)
    return CdcApplied(deltas[-1], table, skipped=False, events=sum(e for _, e in counts.values()),
                      upserts=counts.get(UPSERT, (0, 0))[0], deletes=counts.get(DELETE, (0, 0))[0],
                      live_rows=None if rows is None else max(0, rows - tombstones))


def _recorded_keys(spark, ident: str) -> tuple[str, ...] | None:
    """The key columns the table's newest commit recording them applied by (None: none does);
    one query over its snapshots metadata table (`stream_keys.recorded_keys` of one table)."""
    from pyspark.sql import functions as F

    keys = F.expr(recorded_property_sql(KEYS_PROPERTY, ident))
    rows = (metadata_table(spark, ident, "snapshots").where(keys.isNotNull())
            .agg(F.max_by(keys, F.col("committed_at")).alias("keys")).collect())
    value = rows[0]["keys"] if rows else None
    return tuple(json.loads(value)) if value is not None else None


def _untouched_by(landed: Mapping[int, Mapping[str, CdcLandStats]], table: str, deltas: Sequence[int]) -> bool:
    return all(landed[n].get(table) is None or landed[n][table].rows == 0 for n in deltas)


def _check_untouched(layout: LakeLayout, source: str, table: str, deltas: Sequence[int],
                     landed: Mapping[int, Mapping[str, CdcLandStats]]) -> None:
    """A table the source's mark says is at the delta before `deltas` and none of them changes
    (resources/lake/stream_progress.py) gets nothing (issue 57: a delta commits only to the
    tables it changes). The manifest is asked again, so a caller's wrong claim fails, typed."""
    if not _untouched_by(landed, table, deltas):
        raise DeltaportError(f"{layout.snapshot(source, table)}: taken to be untouched by deltas "
                             f"{deltas[0]}-{deltas[-1]}, but the manifest has changes of it there: its progress "
                             "must be read")


def changed_span(landed: Mapping[int, Mapping[str, CdcLandStats]], table: str, deltas: Sequence[int]) -> list[int]:
    """`deltas` (consecutive) from the first to the last that has changes of `table` ([]: none
    has): those before and after left it alone and are not applied to it (no commit, no tag);
    those between are folded in with the rest (a fold's deltas are consecutive)."""
    touched = [n for n in deltas if not _untouched_by(landed, table, [n])]
    return [n for n in deltas if touched[0] <= n <= touched[-1]] if touched else []


def at_mark(progress: Mapping[str, int | None], floor: int | None) -> dict[str, int | None]:
    """`progress` ({snapshot ident: last applied delta}) with every table below `floor` (the
    source's landed mark) taken to be at it: every delta up to the mark has been applied to every
    table, so one whose newest recorded delta is below it had nothing left to apply up to it (a
    delta that changed nothing records nothing, one of duplicates only records its keys when
    they changed). A table with no recorded delta (none yet) stays None."""
    if floor is None:
        return dict(progress)
    return {ident: floor if done is not None and done < floor else done for ident, done in progress.items()}


def lowest_applied(known: Sequence[int | None]) -> int | None:
    """The lowest of the snapshot tables' last applied deltas `known`, from which on the manifest
    is all a run needs; None (read it all) when there is no table or one has no snapshot yet."""
    return min(known) if known and None not in known else None


def apply_cdc_through(spark, layout: LakeLayout, source: str, target: int,
                      tables: Mapping[str, Sequence[str]],
                      progress: Mapping[str, int | None] | None = None, *,
                      tombstones: Mapping[str, int] | None = None,
                      keep_history: bool = True,
                      landed: tuple[int | None, Mapping[int, Mapping[str, CdcLandStats]]] | None = None,
                      untouched: Sequence[str] = (),
                      floor: int | None = None,
                      ) -> list[CdcApplied]:
    """Bring every snapshot of `tables` ({table: key columns}) to delta `target`, applying each
    missing delta in order (columns from the increment tables). Checks first that every delta
    some table still needs has landed (`MissingDeltasError`, nothing written); a table starts
    after its own last applied delta, or at the first landed delta with its changes.
    `progress`: {snapshot ident: last applied delta} of the existing snapshot tables, as the
    caller read it just before (`stream_keys.current_keys`); a table not in it has none.
    `tombstones`: {snapshot ident: its tombstones}, read with `progress` (`writer_progress`);
    a table not in it has its tombstones counted when a MERGE needs them (`_apply`).
    `keep_history`: each table's history table gets the versions its deltas close. `landed`:
    (since, `cdc_landed_deltas(since=)`) as the caller read it after the run's deltas landed;
    used when it reaches back far enough (else the manifest is read here). `untouched`: tables
    not in `tables` whose progress (in `progress`) the source's mark gave and which the deltas
    up to `target` leave alone (`stream_keys.snapshot_progress`): checked against the manifest,
    nothing written. A delta commits only to the tables it changes (issue 57): each table's
    deltas are cut to the span from its first to its last with changes of it (`changed_span`),
    and a table with a last applied delta below `floor` (the source's landed mark: every delta up
    to it has landed in every table) is taken to be at it: no delta between changed it."""
    if progress is None:  # one query, which reads the tombstones too (those given win)
        read: dict[str, int] = {}
        progress = writer_progress(spark, [layout.snapshot(source, t) for t in sorted(tables)], tombstones=read)
        tombstones = {**read, **(tombstones or {})}
    progress = at_mark(progress, floor)
    # Every table goes on from its last applied delta: the manifest from the lowest of those on
    # is all this needs, unless a table has no snapshot yet (it starts at its first landed change).
    low = lowest_applied([progress.get(layout.snapshot(source, t)) for t in (*tables, *untouched)])
    if landed is not None and (landed[0] is None or (low is not None and landed[0] <= low)):
        landed = landed[1]
    else:
        landed = cdc_landed_deltas(spark, layout, source, since=low)
    plans: dict[str, tuple[int | None, list[int]]] = {}
    for table in sorted({*tables, *untouched}):
        last = progress.get(layout.snapshot(source, table))
        if last is None:
            with_rows = [n for n, t in landed.items() if table in t and t[table].rows > 0 and n <= target]
            if not with_rows:
                continue  # nothing of this table has landed: no snapshot to make yet
            start = min(with_rows)
        else:
            start = last + 1
        plans[table] = (last, list(range(start, target + 1)))
    missing = sorted({n for _, ns in plans.values() for n in ns if n not in landed})
    if missing:
        raise MissingDeltasError(source, target, missing, kind="change stream")
    for table in untouched:
        if table not in tables and table in plans:
            _check_untouched(layout, source, table, plans[table][1], landed)
    todo = [(table, last, changed_span(landed, table, ns)) for table, (last, ns) in plans.items()
            if table in tables]
    todo = [(table, last, ns) for table, last, ns in todo if ns]
    commit_id = uuid.uuid4().hex  # one per table's commit; shared, so the MERGEs can run together

    def apply(table: str, last: int | None, ns: list[int]) -> list[CdcApplied]:
        # a range run's deltas fold into one commit per table
        applied = _apply(spark, layout, source, ns, table, tables[table], None, landed, last, commit_id,
                         keep_history, tombstones=(tombstones or {}).get(layout.snapshot(source, table)))
        failpoint("cdc.applied")
        return applied

    done = [a for applied in side_by_side(apply, todo) for a in applied]
    # Every table is at `target` now: the lake's own mark moves (readers bound "as of" by it).
    mark_landed(spark, layout, source, target)
    return done
