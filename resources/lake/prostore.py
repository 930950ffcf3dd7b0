"""A Prostore datamart in the Iceberg lake: where each delta's tables go and how they are written.

Layout, for datamart `dm` in catalog `lake`:
- `lake.dm.<table>`            snapshot: the table's state, one commit per applied delta that
                                changes it (summary `deltaport.delta=N`), tagged `delta_<N>`
                                (a delta that changes nothing: the tag alone); in a range run,
                                consecutive deltas without a column change fold into one commit
                                (summary `deltaport.deltas=a-b`, tagged `delta_<b>`), and a
                                delta inside it reads as the commit's parent plus the
                                increments' changes up to it (`snapshot_as_of`);
- `lake.dm_increment.<table>`  increment: the raw changes of every delta, with `sys_op`,
                                `delta_num`, `delta_date`, `_kafka_partition`, `_kafka_offset`; partitioned by
                                `delta_num`; re-landing delta N replaces exactly N's rows;
- `lake.dm_meta.changelog`     the changelog shipped with each increment, one row per DDL record;
- `lake.dm_meta.manifest`      one row per (delta, table) landed: rows, upserts, deletes, bytes,
                                offsets, increment id: the record that increment N is complete;
- `lake.dm_meta.signal_events` the signal events of each delta.

Guarantees: every write is one Iceberg commit (see resources/spark/iceberg.py), so a crash
leaves each table at its old or its new state; a range of deltas (a range run) lands in one
commit per increment and meta table, and in as few snapshot commits per table as its column
changes allow, every delta still readable exactly; the
manifest row of a delta is written after all its increment tables, so "increment N landed"
is never claimed early; snapshots apply deltas strictly in order and never twice (each
table's last applied delta is in its own commit summary or tag; the tables of one delta are
applied side by side, the next delta after them); new tables and new columns appear without a
code change.

Schema changes (the changelog's DDL is the authority; `resources/codecs/ddl.py`). The lake
never drops or renames an Iceberg column, so no value that ever landed is lost:
- ADD COLUMN: increment and snapshot tables get the column; rows written before read NULL.
- DROP COLUMN: the column stays in both tables. Each row keeps the value it had when the
  column was dropped until the row is written again; a row written (inserted or updated) after
  the drop reads NULL there, because its new version in Prostore has no such value. So the
  current snapshot holds exactly what was last known of every row, and every older value is
  still in the increment tables and in the snapshot's `delta_<N>` tags. Readers that follow
  the DDL (`read.rows_as_of`) do not see the column any more.
- RENAME COLUMN a TO b: `b` is added and, in the commit of the delta whose DDL first has the
  new name, every row the delta does not write gets `b = a`; `a` stays as a dropped column
  would (old value kept, NULL in rows written later). The same commit rewrites the whole
  table once: a rename costs one full rewrite.
- A column added again after a drop (same name, new column for Prostore): rows the delta
  does not write get NULL in it, in that delta's commit, so no stale value reappears.
- DROP TABLE then CREATE TABLE (a new table of the same name): the old rows are deleted from
  the snapshot table (a commit with no delta number, just before the delta's own commit:
  readers by tag never see it, and a re-run repeats it harmlessly); their history stays.
Incompatible retyping (a dropped column added again with another type) is refused by
`ensure_table` (SchemaEvolutionError), not guessed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import groupby

from resources.codecs.arrow_rows import SYS_OP
from resources.codecs.backup import ChangelogRecord
from resources.codecs.ddl import ColumnTransition, EntitySchema, column_transition, replay_changelog
from resources.codecs.types import Column, spark_type
from resources.errors import DeltaportError
from resources.failpoints import failpoint
from resources.lake.side_by_side import side_by_side
from resources.spark.iceberg import (
    InsideFold,
    checkpoint_checked,
    committed_records,
    ensure_table,
    last_applied_deltas,
    latest_per_key,
    merge_upserts,
    record_unchanged,
    replace_deltas,
    state_as_of_delta,
    table_exists,
    without_session_properties,
)
from resources.spark.kafka_reader import local_frame, output_spark_schema


# Snapshot tables take row-level changes: merge-on-read writes the delta's changed rows and
# delete files instead of rewriting every data file a MERGE touches (copy-on-write rewrote the
# whole table for a 1% delta of random keys: `make bench`, section 3).
SNAPSHOT_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
}


class MissingDeltasError(DeltaportError):
    """A snapshot cannot advance: earlier deltas have not landed as increments."""

    def __init__(self, datamart: str, target: int, missing: Sequence[int]):
        self.missing = list(missing)
        super().__init__(f"datamart {datamart!r}: cannot bring snapshots to delta {target}: "
                         f"increments of delta(s) {', '.join(map(str, missing))} have not landed; "
                         f"materialize them first")


@dataclass(frozen=True)
class LakeLayout:
    catalog: str = "lake"

    def snapshot(self, datamart: str, table: str) -> str:
        return f"{self.catalog}.{datamart}.{table}"

    def increment(self, datamart: str, table: str) -> str:
        return f"{self.catalog}.{datamart}_increment.{table}"

    def meta(self, datamart: str, name: str) -> str:
        return f"{self.catalog}.{datamart}_meta.{name}"


@dataclass(frozen=True)
class TableStats:
    table: str
    rows: int
    upserts: int
    deletes: int


def data_tables(entities: Mapping[str, EntitySchema]) -> dict[str, EntitySchema]:
    """The entities that hold data in a backup: logical tables (views hold none)."""
    return {name: e for name, e in entities.items() if e.kind == "table"}


def _struct(columns: Sequence[Column], extra: Sequence[tuple[str, object]] = ()):
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(c.name, spark_type(c), True) for c in columns]
                      + [StructField(n, t, True) for n, t in extra])


def _c(name: str):
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _table_columns(frame, table_schema, extra: Sequence[str] = (), columns: Sequence[str] | None = None):
    """`frame` with exactly the table's columns (+ `extra`): a table column the frame lacks (one
    the DDL no longer has) is NULL. Writes and MERGE both need every table column. `columns`:
    the frame's columns when the caller knows them (asking the server costs a round trip that,
    for rows the client sends, carries them all)."""
    from pyspark.sql import functions as F

    have = {c.lower(): c for c in (frame.columns if columns is None else columns)}
    cols = [_c(have[f.name.lower()]).cast(f.dataType).alias(f.name) if f.name.lower() in have
            else F.lit(None).cast(f.dataType).alias(f.name) for f in table_schema.fields]
    return frame.select(*cols, *[_c(have[e.lower()]).alias(e) for e in extra])


# --- changelog ---------------------------------------------------------------------------

def land_changelog(spark, layout: LakeLayout, datamart: str, delta_num: int, increment_id: str,
                   records: Sequence[ChangelogRecord]) -> dict[str, EntitySchema]:
    """Write increment N's changelog (one row per record) and return the schema it describes."""
    return land_changelogs(spark, layout, datamart, [(delta_num, increment_id, records)])[delta_num]


def land_changelogs(spark, layout: LakeLayout, datamart: str,
                    deltas: Sequence[tuple[int, str, Sequence[ChangelogRecord]]]) -> dict[int, dict[str, EntitySchema]]:
    """Write the changelogs of several deltas [(delta, increment id, records)] in one commit
    (one row per record); returns {delta: the schema its changelog describes}."""
    from pyspark.sql.types import LongType, StringType

    out, rows = {}, []
    for delta_num, increment_id, records in deltas:
        out[delta_num] = replay_changelog(records)
        rows += [(delta_num, increment_id, r.change_num, r.entity_name, r.change_query)
                 for r in sorted(records, key=lambda r: r.change_num)]
    schema = _plain_schema([("delta_num", LongType()), ("increment_id", StringType()), ("change_num", LongType()),
                            ("entity_name", StringType()), ("change_query", StringType())])
    ident = layout.meta(datamart, "changelog")
    ensure_table(spark, ident, schema, partition_by=["delta_num"])
    last = max(out)
    replace_deltas(spark, ident, spark.createDataFrame(rows, schema), list(out),
                   extra_summary={"deltaport.entities": ",".join(sorted(e.name for e in out[last].values()))})
    return out


def changelog_history(spark, layout: LakeLayout, datamart: str,
                      since: int | None = None) -> dict[int, list[ChangelogRecord]]:
    """Every landed delta's changelog records, {delta: records} (small: DDL only); with `since`,
    only those of deltas >= since (the table is partitioned by delta: the files of older ones
    are not read, so the cost does not grow with the lake's age)."""
    ident = layout.meta(datamart, "changelog")
    if not table_exists(spark, ident):
        return {}
    out: dict[int, list[ChangelogRecord]] = {}
    for r in _since(spark.table(ident), since).select("delta_num", "change_num", "entity_name",
                                                       "change_query").collect():
        out.setdefault(r.delta_num, []).append(ChangelogRecord(r.change_num, r.entity_name, r.change_query))
    return out


def _since(frame, since: int | None):
    from pyspark.sql import functions as F

    return frame if since is None else frame.where(F.col("delta_num") >= since)


def _plain_schema(fields):
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(n, t, True) for n, t in fields])


# --- increment ---------------------------------------------------------------------------

@dataclass(frozen=True)
class IncrementDelta:
    """One delta for `land_increments`: its increment's identity, schema and row frames
    ({table: data columns + sys_op + _kafka_partition + _kafka_offset}, as a DataFrame or, for
    rows the driver read, the Arrow table `table_changes(local_as_arrow=True)` returns)."""

    delta_num: int
    delta_date_us: int
    increment_id: str
    entities: Mapping[str, EntitySchema]
    frames: Mapping[str, object]
    provenance: Mapping[str, object] = field(default_factory=dict)


def land_increment(spark, layout: LakeLayout, datamart: str, delta_num: int, delta_date_us: int,
                   increment_id: str, entities: Mapping[str, EntitySchema], frames: Mapping[str, object],
                   *, provenance: Mapping[str, object] | None = None) -> list[TableStats]:
    """`land_increments` of one delta."""
    one = IncrementDelta(delta_num, delta_date_us, increment_id, entities, frames, provenance or {})
    return land_increments(spark, layout, datamart, [one])[delta_num]


def land_increments(spark, layout: LakeLayout, datamart: str,
                    deltas: Sequence[IncrementDelta]) -> dict[int, list[TableStats]]:
    """Replace the rows of every given delta in every increment table, one commit per table for
    all of them (`land_increment_tables`), then record the deltas in the manifest (one commit,
    after every table: so "increment N landed" is never claimed early: `record_increments`).
    Returns {delta: stats per table}."""
    stats = land_increment_tables(spark, layout, datamart, deltas)
    record_increments(spark, layout, datamart, deltas, stats)
    return stats


def land_increment_tables(spark, layout: LakeLayout, datamart: str,
                          deltas: Sequence[IncrementDelta]) -> dict[int, list[TableStats]]:
    """The increment tables' part of `land_increments`: every table's commit, each checked
    against the rows its write sent (`verify_committed`); nothing is recorded in the manifest.
    Returns {delta: stats per table}.

    A table of a delta's schema with no frame had no change in that delta and is still part of
    the table's commit, so its history says the delta was seen. A table in a delta's `frames`
    but not in its `entities` is refused: data whose schema the changelog does not describe
    must not land. A table's columns evolve in delta order (a range may hold schema changes).
    The tables are written side by side (`side_by_side`).
    """
    from pyspark.sql.types import IntegerType, LongType, TimestampNTZType

    deltas = sorted(deltas, key=lambda d: d.delta_num)
    for d in deltas:
        unknown = sorted(set(d.frames) - set(data_tables(d.entities)))
        if unknown:
            raise DeltaportError(f"datamart {datamart!r} delta {d.delta_num}: data for table(s) {unknown} "
                                 f"that the increment's changelog does not define")
    extra = [("sys_op", IntegerType()), ("_kafka_partition", IntegerType()), ("_kafka_offset", LongType()),
             ("delta_num", LongType()), ("delta_date", TimestampNTZType())]

    def land_table(name: str) -> tuple[str, str, list[tuple[int, TableStats]]]:
        """(the table's ident, its commit id, [(delta, stats)])"""
        ident = layout.increment(datamart, name)
        seen = [d for d in deltas if name in data_tables(d.entities)]
        struct = None
        for d in seen:  # in delta order: the table's columns evolve as the DDL did
            if _struct(d.entities[name].columns, extra) != struct:
                struct = _struct(d.entities[name].columns, extra)
                ensure_table(spark, ident, struct, partition_by=["delta_num"])
        # Columns dropped from (or renamed in) the DDL stay in the table: NULL in this delta.
        table_schema = spark.table(ident).schema
        parts, counted = _range_parts(spark, name, seen, table_schema)
        frame = reduce(lambda x, y: x.unionByName(y), parts) if parts else spark.createDataFrame([], table_schema)
        ids = ",".join(dict.fromkeys(d.increment_id for d in seen))
        failpoint("increment.write")
        commit = replace_deltas(spark, ident, frame, [d.delta_num for d in seen],
                                extra_summary={"deltaport.increment-id": ids})
        failpoint("increment.table_committed")
        out = []
        for d in seen:
            rows, deletes = counted[d.delta_num]() if d.delta_num in counted else (0, 0)
            out.append((d.delta_num, TableStats(name, rows, rows - deletes, deletes)))
        return ident, commit, out

    # The tables go side by side: a table's write from the client's rows spends much of its
    # time converting them on the server's driver, one thread per write, which another table's
    # write can overlap.
    names = sorted({n for d in deltas for n in data_tables(d.entities)})
    stats: dict[int, list[TableStats]] = {d.delta_num: [] for d in deltas}
    commits: dict[str, str] = {}  # per table: its commit, and the rows its write sent
    written: dict[str, int] = {}
    for ident, commit, table_stats in side_by_side(land_table, [(n,) for n in names]):
        commits[ident] = commit
        for delta_num, st in table_stats:
            stats[delta_num].append(st)
            written[ident] = written.get(ident, 0) + st.rows
    verify_committed(datamart, [d.delta_num for d in deltas], written, committed_records(spark, commits))
    return stats


def _range_parts(spark, name: str, seen: Sequence[IncrementDelta], table_schema) -> tuple[list, dict]:
    """Table `name`'s rows of the deltas in `seen`, as DataFrames in the table's columns with
    delta_num and delta_date, and {delta: () -> (rows, deletes) it holds}, known once the
    DataFrames were written.

    Rows the driver read (Arrow tables) are counted here, and go to Spark as one relation per
    column layout, not one per delta: each local relation of a union costs its own scan and
    tasks (ten deltas of 2k rows written in 1.0 s unioned, 0.3 s as one relation). Rows the
    executors read stay lazy frames, counted while the write reads them (an observation per
    delta's frame: two aggregates per row, where one observation of the whole range evaluated
    two per delta on every row, 1-1.5 s of a 3 s write of ten deltas, 300k rows)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType, TimestampNTZType

    parts, local, counted = [], {}, {}  # local: {arrow schema: (spark schema, [tables])}
    for d in seen:
        got = d.frames.get(name)
        if got is None:
            continue
        if isinstance(got, pa.Table):
            rows, deletes = got.num_rows, pc.sum(pc.equal(got[SYS_OP], 1)).as_py() or 0
            counted[d.delta_num] = lambda rows=rows, deletes=deletes: (rows, deletes)
            got = (got.append_column("delta_num", pa.repeat(pa.scalar(d.delta_num, pa.int64()), rows))
                   .append_column("delta_date", pa.repeat(pa.scalar(d.delta_date_us, pa.timestamp("us")), rows)))
            struct = StructType([*output_spark_schema(d.entities[name].columns).fields,
                                 StructField("delta_num", LongType()), StructField("delta_date", TimestampNTZType())])
            local.setdefault(got.schema, (struct, []))[1].append(got)
            continue
        observed = Observation(f"deltaport_increment_{uuid.uuid4().hex}")
        got = got.observe(observed, F.count(F.lit(1)).alias("rows"),
                          F.count_if(F.col(SYS_OP) == 1).alias("deletes"))
        counted[d.delta_num] = lambda o=observed: (int(o.get["rows"]), int(o.get["deletes"]))
        parts.append(_table_columns(got.withColumn("delta_num", F.lit(d.delta_num).cast("long"))
                                    .withColumn("delta_date", F.timestamp_micros(F.lit(d.delta_date_us))
                                                .cast("timestamp_ntz")), table_schema))
    for struct, tables in local.values():
        parts.append(_table_columns(local_frame(spark, pa.concat_tables(tables).combine_chunks(), struct),
                                    table_schema, columns=struct.names))
    return parts, counted


class IncrementNotLandedError(DeltaportError):
    """An increment table's commit does not hold the rows the write sent: nothing is claimed."""


def verify_committed(datamart: str, deltas: Sequence[int], written: Mapping[str, int],
                     committed: Mapping[str, int]) -> None:
    """Raise `IncrementNotLandedError` unless each table's commit added exactly the rows the write
    counted as it sent them ({ident: rows}, `written`; `committed` from the commits' summaries).
    Checked before the manifest is written, so "increment N landed" is never claimed for a
    commit that lost or gained rows; the rows are counted from the write and the commit, not by
    scanning the table again."""
    wrong = {ident: (rows, committed.get(ident)) for ident, rows in sorted(written.items())
             if committed.get(ident, 0 if rows == 0 else None) != rows}
    if wrong:
        detail = "; ".join(f"{ident}: {rows} rows written, {'no commit found' if got is None else f'{got} committed'}"
                           for ident, (rows, got) in wrong.items())
        raise IncrementNotLandedError(f"datamart {datamart!r} delta(s) {', '.join(map(str, deltas))}: "
                                      f"increment not landed as written ({detail}); the manifest was not written")


def record_increments(spark, layout: LakeLayout, datamart: str, deltas: Sequence[IncrementDelta],
                      stats: Mapping[int, Sequence[TableStats]]) -> None:
    """Record the deltas as landed in the manifest (one commit): call it only once every increment
    table of theirs has committed (`land_increment_tables`) and their changelog has landed."""
    from pyspark.sql.types import LongType, StringType

    failpoint("increment.before_manifest")

    schema = _plain_schema([("delta_num", LongType()), ("table_name", StringType()), ("rows", LongType()),
                            ("upserts", LongType()), ("deletes", LongType()), ("increment_id", StringType()),
                            ("delta_date_us", LongType()), ("provenance", StringType())])
    rows = []
    for d in deltas:
        prov = json.dumps(dict(d.provenance), sort_keys=True, default=str)
        mine = [(d.delta_num, s.table, s.rows, s.upserts, s.deletes, d.increment_id, d.delta_date_us, prov)
                for s in stats[d.delta_num]]
        # A delta with no data table still needs its manifest row: "landed" must be recordable.
        rows += mine or [(d.delta_num, None, 0, 0, 0, d.increment_id, d.delta_date_us, prov)]
    ident = layout.meta(datamart, "manifest")
    ensure_table(spark, ident, schema, partition_by=["delta_num"])
    # Meta tables are read by delta_num, never by tag: one commit, no tag commit.
    replace_deltas(spark, ident, spark.createDataFrame(rows, schema), [d.delta_num for d in deltas])


def landed_deltas(spark, layout: LakeLayout, datamart: str,
                  since: int | None = None) -> dict[int, dict[str, TableStats]]:
    """{delta: {table: stats}} of every increment recorded in the manifest; with `since`, of the
    deltas >= since only (as `changelog_history`)."""
    ident = layout.meta(datamart, "manifest")
    if not table_exists(spark, ident):
        return {}
    out: dict[int, dict[str, TableStats]] = {}
    for r in _since(spark.table(ident), since).collect():
        tables = out.setdefault(r.delta_num, {})
        if r.table_name is not None:
            tables[r.table_name] = TableStats(r.table_name, r.rows, r.upserts, r.deletes)
    return out


# --- snapshot ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Applied:
    delta_num: int
    table: str
    upserts: int
    deletes: int


def snapshot_progress(spark, layout: LakeLayout, datamart: str, tables: Sequence[str]) -> dict[str, int | None]:
    """{snapshot ident: its last applied delta, or None} of every named table, a missing table
    as None; one query (`last_applied_deltas`, missing tags repaired), as `apply_snapshots`
    asks it for its target's tables."""
    idents = [layout.snapshot(datamart, t) for t in tables]
    return dict.fromkeys(idents) | last_applied_deltas(spark, idents, repair_tags=True)


def apply_snapshots(spark, layout: LakeLayout, datamart: str, target: int, history=None, *,
                    landed: Mapping[int, Mapping[str, TableStats]] | None = None,
                    progress: Mapping[str, int | None] | None = None,
                    known_from: int | None = None) -> list[Applied]:
    """Bring every snapshot table of the datamart to delta `target`, delta by delta, in order.

    Each table starts after its own last applied delta (from its commit summaries), so a crash
    between tables, or a re-run, applies nothing twice; a table born in delta k starts at k.
    Fails with MissingDeltasError, before writing anything, if a delta that some table still
    needs has not landed as an increment. When a table's DDL changed since the delta last
    applied to it, the delta's commit also carries the schema change (module docstring).

    What the caller has read already, or knows because it has just written it, is not read
    again: `history`, the datamart's `changelog_history`; `landed`, the manifest
    (`landed_deltas`); `progress`, the `snapshot_progress` of the target's tables, read after
    the last snapshot commit (nothing else writes them: one run at a time per datamart).
    `known_from`: `history` and `landed` hold only the deltas from this one on (read `since` it:
    the lowest last applied delta of the target's tables, which must be in `landed`); a table
    whose DDL is needed from before it makes the whole history be read.
    """
    landed = landed_deltas(spark, layout, datamart) if landed is None else landed
    history = changelog_history(spark, layout, datamart) if history is None else history
    if target not in landed:
        raise MissingDeltasError(datamart, target, [target])
    first = min(landed)
    tables_at: dict[int, dict[str, EntitySchema]] = {}

    def schema_at(n: int) -> dict[str, EntitySchema]:
        if n not in tables_at:
            tables_at[n] = data_tables(replay_changelog(history.get(n, [])))
        return tables_at[n]

    # The progress of the target's tables in one query (a table dropped before the target is
    # asked for on its own); a table not there yet (born later, or never) starts at the first
    # landed delta.
    asked: dict[str, int | None] = dict(progress or {})

    def last_applied(name: str) -> int:
        ident = layout.snapshot(datamart, name)
        if ident not in asked:
            asked.update(snapshot_progress(spark, layout, datamart, [name] if asked else list(schema_at(target))))
        done = asked[ident]
        return done if done is not None else first - 1

    last = {name: last_applied(name) for name in schema_at(target)}
    start = min(last.values(), default=target) + 1
    missing = [n for n in range(max(start, first), target + 1) if n not in landed]
    if missing:
        raise MissingDeltasError(datamart, target, missing)
    plan = []  # (delta, entity, stats, transition), in the order they are applied
    for n in range(max(start, first), target + 1):
        for name, entity in sorted(schema_at(n).items()):
            if name not in last:  # a table dropped by `target`: its own progress, not a guess
                last[name] = last_applied(name)
            if last[name] >= n:
                continue
            if known_from is not None and first <= last[name] < known_from:  # a table left behind
                history, known_from = {**changelog_history(spark, layout, datamart), **history}, None
            before = schema_at(last[name]).get(name) if last[name] in history else None
            plan.append((n, entity, landed[n].get(name, TableStats(name, 0, 0, 0)),
                         column_transition(before, entity) if before is not None else None))
            last[name] = n
    prepared = _prepare_ranges(spark, layout, datamart, plan)

    def step_done(step, commit_id: str) -> list[Applied]:
        deltas, entity = [n for n, *_ in step], step[-1][1]
        if len(step) > 1:
            _apply_fold(spark, layout, datamart, deltas, [e for _, e, _, _ in step], prepared[entity.name],
                        commit_id)
        else:
            n, entity, stats, transition = step[0]
            _apply_delta(spark, layout, datamart, n, entity, stats, transition, prepared.get(entity.name),
                         commit_id)
        failpoint("snapshot.table_done")
        return [Applied(n, e.name, stats.upserts, stats.deletes) for n, e, stats, _ in step]

    # The steps that start at the same delta (one per table) go side by side, sharing a commit
    # id (one commit per table), so that their MERGEs share the session's commit properties;
    # the next delta's steps wait for them, so every table still goes forward in delta order.
    groups = [list(g) for _, g in groupby(_fold_steps(plan, prepared), key=lambda step: step[0][0])]
    applied = []
    for i, group in enumerate(groups):
        commit_id = uuid.uuid4().hex
        applied += [a for done in side_by_side(step_done, [(step, commit_id) for step in group]) for a in done]
        if i + 1 < len(groups):
            failpoint("snapshot.delta_done")
    return applied


def _fold_steps(plan, prepared: Mapping[str, object]) -> list[list]:
    """The plan cut into steps, each applied in one commit: per table, a run of consecutive
    deltas whose columns did not change and whose changes `_prepare_ranges` checked together,
    with rows in at least one of them, is one step (folded: one MERGE of the last change per
    key); any other delta is a step of its own. Steps come in the order of their first delta,
    so each table still goes forward in delta order."""
    runs: list[list] = []
    open_run: dict[str, list] = {}  # table -> its run being built
    for item in plan:
        n, entity, _, transition = item
        run = open_run.get(entity.name)
        foldable = entity.name in prepared and _plain(transition)
        if foldable and run is not None and run[-1][0] == n - 1:
            run.append(item)
            continue
        run = [item]
        runs.append(run)
        open_run[entity.name] = run if foldable else None
    steps = []
    for run in runs:
        if len(run) > 1 and any(stats.rows for _, _, stats, _ in run):
            steps.append(run)
        else:  # nothing to fold: a tag per delta records them, as a run of one delta would
            steps += [[item] for item in run]
    return sorted(steps, key=lambda step: step[0][0])


def _plain(transition: ColumnTransition | None) -> bool:
    """A delta whose columns did not change since the table's last one: its MERGE needs only its rows."""
    return transition is None or not (transition.recreated or transition.renamed or transition.added)


def _prepare_ranges(spark, layout: LakeLayout, datamart: str, plan) -> dict[str, object]:
    """{table: its changes of every planned delta, checkpointed}, for tables with rows in two or
    more planned deltas under one primary key: read from the increment table and materialized
    once, exact duplicates dropped and keys checked per delta in that same job, before any
    commit. A range run's MERGEs then cost no job besides their own."""
    from pyspark.sql import functions as F

    by_table: dict[str, list] = {}
    for n, entity, stats, transition in plan:
        if stats.rows and _plain(transition):
            by_table.setdefault(entity.name, []).append((n, tuple(entity.primary_key)))
    # Checked here: a table's range (two deltas or more, one key); one delta, or a key that
    # changed, is checked by the delta's own MERGE.
    ranges = [(name, items) for name, items in sorted(by_table.items())
              if len(items) >= 2 and len({key for _, key in items}) == 1]

    def checked(name: str, items: list):
        deltas = [n for n, _ in items]
        changes = (spark.table(layout.increment(datamart, name)).where(F.col("delta_num").isin(*deltas))
                   .drop("delta_date", "_kafka_partition", "_kafka_offset"))
        return checkpoint_checked(layout.snapshot(datamart, name), changes, items[0][1], deltas=deltas,
                                  delta_column="delta_num")

    return dict(zip([name for name, _ in ranges], side_by_side(checked, ranges)))


def _apply_fold(spark, layout: LakeLayout, datamart: str, deltas: Sequence[int], entities: Sequence[EntitySchema],
                prepared, commit_id: str | None = None) -> None:
    """One commit taking one snapshot table from its state before `deltas` (consecutive, no
    column change among them) to the state after the last: the MERGE of each key's last change
    in them (`prepared`: the table's checked changes of the range). The commit records the
    deltas and is tagged with the last; `snapshot_as_of` reads the states between."""
    from pyspark.sql import functions as F

    ident = layout.snapshot(datamart, entities[-1].name)
    struct = None
    for entity in entities:  # a dropped column stays in the table; none is added inside a fold
        if _struct(entity.columns) != struct:
            struct = _struct(entity.columns)
            ensure_table(spark, ident, struct, properties=SNAPSHOT_TABLE_PROPERTIES)
    keys = list(entities[-1].primary_key)
    changes = prepared.where(F.col("delta_num").between(deltas[0], deltas[-1]))
    last = latest_per_key(changes, keys, order_column="delta_num").drop("delta_num")
    last = _table_columns(last, spark.table(ident).schema, extra=["sys_op"])
    merge_upserts(spark, ident, last, keys, delta_num=deltas[-1], checked=True, folded=deltas, commit_id=commit_id)


def snapshot_as_of(spark, layout: LakeLayout, datamart: str, table: str, delta_num: int,
                   primary_key: Sequence[str]):
    """The snapshot table as it was right after `delta_num`: its `delta_<N>` tag, or, for a
    delta inside a folded commit (`_apply_fold`), that commit's parent (the state before the
    fold) with the fold's changes up to N applied, each key's last change winning. Raises
    `DeltaNotFoundError` when neither records N."""
    from pyspark.sql import functions as F

    state = state_as_of_delta(spark, layout.snapshot(datamart, table), delta_num)
    if not isinstance(state, InsideFold):
        return state
    fold, schema, base = state.fold, state.schema, state.base
    keys = list(primary_key)
    changes = (spark.table(layout.increment(datamart, table))
               .where(F.col("delta_num").between(fold.deltas[0], delta_num))
               .drop("delta_date", "_kafka_partition", "_kafka_offset"))
    last = _table_columns(latest_per_key(changes, keys, order_column="delta_num").drop("delta_num"), schema,
                          extra=["sys_op"])
    kept = base.join(last.select(*[_c(k) for k in keys]), on=keys, how="left_anti")
    return kept.unionByName(last.where(F.col("sys_op").isNull() | (F.col("sys_op") != 1)).drop("sys_op"))


def _apply_delta(spark, layout: LakeLayout, datamart: str, n: int, entity: EntitySchema, stats: TableStats,
                 transition: ColumnTransition | None, prepared=None, commit_id: str | None = None) -> None:
    """One commit taking one snapshot table from its state after the previous delta to delta n.

    `transition`: how the table's columns changed since the delta last applied (None: not
    known, nothing to carry over). `prepared`: the table's checked changes of a range
    (`_prepare_ranges`), used when the delta's columns did not change."""
    from pyspark.sql import functions as F

    ident = layout.snapshot(datamart, entity.name)
    existed = table_exists(spark, ident)
    had = {f.name.lower() for f in spark.table(ident).schema.fields} if existed else set()
    if existed and transition is not None and transition.recreated:
        # A new table of the same name: the old one's rows go (its history stays in the tags).
        with without_session_properties(spark):  # other tables' MERGEs may be running beside
            spark.sql(f"DELETE FROM {'.'.join(f'`{p}`' for p in ident.split('.'))}")
    ensure_table(spark, ident, _struct(entity.columns), properties=SNAPSHOT_TABLE_PROPERTIES)
    # Rows the delta does not write still change when a column was renamed (the new name takes
    # the old name's value) or added again after a drop (the stale value must not come back).
    carry: dict[str, str | None] = {}
    if transition is not None and not transition.recreated:
        carry = dict(transition.renamed)
        carry.update({c: None for c in transition.added if c.lower() in had})
    table = spark.table(ident)
    if stats.rows == 0 and not carry:
        # Nothing changed: the tag alone records delta n, cheaply.
        record_unchanged(spark, ident, table.schema, n, new=not existed)
        return
    keys = list(entity.primary_key)
    if prepared is not None and _plain(transition):
        changes = _table_columns(prepared.where(F.col("delta_num") == n).drop("delta_num"), table.schema,
                                 extra=["sys_op"])
        merge_upserts(spark, ident, changes, keys, delta_num=n, checked=True, commit_id=commit_id)
        return
    changes = (spark.table(layout.increment(datamart, entity.name)).where(F.col("delta_num") == n)
               .drop("delta_num", "delta_date", "_kafka_partition", "_kafka_offset"))
    changes = _table_columns(changes, table.schema, extra=["sys_op"])
    if not carry:  # the MERGE checks the keys in its own job
        merge_upserts(spark, ident, changes, keys, delta_num=n, commit_id=commit_id)
        return
    # The rows the delta does not write come from the table itself: materialized (and checked)
    # before the MERGE rewrites that table.
    untouched = table.join(changes.select(*[_c(k) for k in keys]), on=keys, how="left_anti")
    types = {f.name: f.dataType for f in table.schema.fields}
    untouched = untouched.select(
        *[(_c(carry[f.name]) if carry[f.name] is not None else F.lit(None)).cast(types[f.name]).alias(f.name)
          if f.name in carry else _c(f.name) for f in table.schema.fields],
        F.lit(0).cast("int").alias("sys_op"))
    changes = checkpoint_checked(ident, changes.unionByName(untouched), keys, deltas=[n])
    if changes.isEmpty():  # a rename in an empty table, with no change in the delta
        record_unchanged(spark, ident, table.schema, n)
        return
    merge_upserts(spark, ident, changes, keys, delta_num=n, checked=True, commit_id=commit_id)

