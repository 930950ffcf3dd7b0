"""A Prostore datamart in the Iceberg lake: where each delta's tables go and how they are written.

Layout, for datamart `dm` in catalog `lake`:
- `lake.dm.<table>`            snapshot: the table's state, one commit per applied delta that
                                changes it (summary `deltaport.delta=N`), tagged `delta_<N>`
                                (a delta that changes nothing: the tag alone); in a range run,
                                consecutive deltas without a column change fold into one commit
                                (summary `deltaport.deltas=a-b`, tagged `delta_<b>`), and a
                                delta inside it reads as the commit's parent plus the
                                increments' changes up to it (`snapshot_as_of`; applying and
                                reading snapshots: `resources/lake/prostore_snapshot.py`);
- `lake.dm_increment.<table>`  increment: the raw changes of every delta, with `sys_op`,
                                `delta_num`, `delta_date`, `_kafka_partition`, `_kafka_offset`; partitioned by
                                `delta_num`; re-landing delta N replaces exactly N's rows;
- `lake.dm_meta.changelog`     the changelog shipped with each increment, one row per DDL record;
- `lake.dm_meta.manifest`      one row per (delta, table) landed: rows, upserts, deletes, bytes,
                                offsets, increment id: the record that increment N is complete;
- `lake.dm_meta.signal_events` the signal events of each delta.

Guarantees: every write is one Iceberg commit (see resources/spark/iceberg.py), so a crash
leaves each table at its old or its new state (a new increment table is made holding its first
rows in that one commit: `create_with_deltas`); a range of deltas (a range run) lands in one
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
import threading
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from resources.codecs.backup import ChangelogRecord
from resources.codecs.ddl import EntitySchema, replay_changelog
from resources.codecs.types import Column, spark_type
from resources.errors import DeltaportError
from resources.failpoints import failpoint
from resources.lake.layout import LakeLayout
# Shared by every source's tables; importable from here as before.
from resources.lake.source_tables import (SNAPSHOT_TABLE_PROPERTIES, IncrementNotLandedError,  # noqa: F401
                                          MissingDeltasError, _since, counted_back, verify_committed)
from resources.lake.side_by_side import side_by_side
from resources.spark.iceberg import (
    committed_records,
    create_with_deltas,
    ensure_table,
    replace_deltas,
    spark_schema,
    table_exists,
)
from resources.spark.unions import union_all




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


def changelog_history(spark, layout: LakeLayout, datamart: str, since: int | None = None,
                      until: int | None = None) -> dict[int, list[ChangelogRecord]]:
    """Every landed delta's changelog records, {delta: records} (small: DDL only); with `since`,
    only those of deltas >= since, with `until` those <= until (the table is partitioned by
    delta: the files of other deltas are not read, so the cost does not grow with the lake's age)."""
    from pyspark.sql import functions as F

    ident = layout.meta(datamart, "changelog")
    if not table_exists(spark, ident):
        return {}
    out: dict[int, list[ChangelogRecord]] = {}
    frame = _since(spark.table(ident), since)
    frame = frame if until is None else frame.where(F.col("delta_num") <= until)
    for r in frame.select("delta_num", "change_num", "entity_name",
                                                       "change_query").collect():
        out.setdefault(r.delta_num, []).append(ChangelogRecord(r.change_num, r.entity_name, r.change_query))
    return out


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


class MetaRead:
    """The manifest's and the changelog's rows of the deltas from `since` on (to `until`), as
    (`landed_deltas`, `changelog_history`): read once, side by side, by whichever part of a step
    asks first; a part asking while the read is under way waits for it, and every part gets the
    same rows (two parts of one step, each in its own thread, used to read them both). A failed
    read fails every part that asks. Each caller gets its own outer dicts (it may add deltas)."""

    def __init__(self, spark, layout: LakeLayout, datamart: str, since: int, until: int | None = None):
        self.since, self.until = since, until
        self._args = (spark, layout, datamart)
        self._lock = threading.Lock()
        self._read: tuple | None = None  # (landed, history) once read
        self._error: BaseException | None = None

    def holds(self, delta_num: int) -> bool:
        """Whether the read takes in delta `delta_num`'s rows."""
        return self.since <= delta_num and (self.until is None or delta_num <= self.until)

    def get(self) -> tuple[dict[int, dict[str, TableStats]], dict[int, list[ChangelogRecord]]]:
        with self._lock:
            if self._read is None and self._error is None:
                try:
                    self._read = tuple(side_by_side(
                        lambda read: read(*self._args, since=self.since, until=self.until),
                        [(landed_deltas,), (changelog_history,)]))
                except BaseException as exc:
                    self._error = exc
        if self._error is not None:
            raise self._error
        landed, history = self._read
        return dict(landed), dict(history)


def unchanged_increment_tables(spark, layout: LakeLayout, datamart: str, deltas: Sequence[IncrementDelta],
                               meta: MetaRead | None = None) -> frozenset[str]:
    """The tables whose increment tables the run's `deltas` leave as they are: no rows in any of
    them, and in each the same DDL as in the delta before the run, which the manifest records as
    landed. That delta's landing made or evolved every table of its changelog to those columns
    before its manifest row was written, so nothing is to be made, evolved or checked again
    (issue 57: asking each table's schema cost a round trip per table of the datamart, 500 of
    them a delta at 500 tables). `meta`: the step's read of the meta tables, when it takes in that
    delta (the snapshot's side reads them too: one read serves both); else the manifest and the
    changelog of that delta's partition are read here. Empty when that delta is not recorded (the
    first, or a lake rebuilt): every table is asked."""
    before = min(d.delta_num for d in deltas) - 1
    if before < 0 or all(d.frames.get(name) is not None for d in deltas for name in data_tables(d.entities)):
        return frozenset()  # nothing before, or every table has rows: no read would spare a thing
    if meta is None or not meta.holds(before):
        meta = MetaRead(spark, layout, datamart, since=before, until=before)
    landed, history = meta.get()
    if before not in landed or before not in history:
        return frozenset()
    then = {n: e for n, e in data_tables(replay_changelog(history[before])).items() if n in landed[before]}
    return frozenset(name for name, entity in then.items()
                     if all(d.frames.get(name) is None and d.entities.get(name) == entity for d in deltas))


def land_increment_tables(spark, layout: LakeLayout, datamart: str, deltas: Sequence[IncrementDelta],
                          unchanged: frozenset[str] | Future = frozenset()) -> dict[int, list[TableStats]]:
    """The increment tables' part of `land_increments`: every table's commit, each checked
    against the rows its write sent (`verify_committed`); nothing is recorded in the manifest.
    Returns {delta: stats per table}.

    A table of a delta's schema with no frame had no change in that delta: it is part of the
    table's commit when another delta of the run changed it, and gets no commit when none did
    (unless it was made just now). A table in a delta's `frames`
    but not in its `entities` is refused: data whose schema the changelog does not describe
    must not land. A table's columns evolve in delta order (a range may hold schema changes).
    The tables are written side by side (`side_by_side`). `unchanged`: tables known to need
    nothing (`unchanged_increment_tables`): not asked for their schema either; as a Future, the
    tables with rows go first and do not wait for it (its reads overlap their writes).
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

    def land_table(name: str) -> tuple[str, str | None, list[tuple[int, TableStats]]]:
        """(the table's ident, its commit id or None when it made none, [(delta, stats)])"""
        ident = layout.increment(datamart, name)
        seen = [d for d in deltas if name in tables_of[d.delta_num]]
        if not any(d.frames.get(name) is not None for d in seen) and name in known():
            return ident, None, [(d.delta_num, TableStats(name, 0, 0, 0)) for d in seen]
        structs = [_struct(d.entities[name].columns, extra) for d in seen]
        # A table not there yet, of one set of columns in these deltas, is made holding their rows
        # (none: its first, empty commit) in one commit (`create_with_deltas`), not two.
        new = all(s == structs[0] for s in structs) and not table_exists(spark, ident)
        struct, created, made = None, new, spark_schema(structs[0]) if new else None
        for d, wanted in zip(seen, structs) if not new else ():  # in delta order: columns evolve as the DDL did
            if wanted != struct:
                struct = wanted
                ensured = ensure_table(spark, ident, struct, partition_by=["delta_num"])
                created = ensured.created or created
                made = ensured.schema  # as made or as it is: not asked again (None after an ALTER)
        if not created and not any(d.frames.get(name) is not None for d in seen):
            # No change of the table in these deltas: no commit (a job and a metadata commit per
            # untouched table per delta, every one of a datamart's tables). Nothing of these
            # deltas can be in it: a closed delta's changes never change (the index keeps a
            # closed delta closed whatever cancel follows), so an earlier landing of them wrote
            # no row here either. A table made now gets its first, empty commit, so every reader
            # finds a snapshot.
            return ident, None, [(d.delta_num, TableStats(name, 0, 0, 0)) for d in seen]
        # Columns dropped from (or renamed in) the DDL stay in the table: NULL in this delta.
        table_schema = made if made is not None else spark.table(ident).schema
        parts, counted = _range_parts(spark, name, seen, table_schema)
        frame = union_all(parts, by_name=True) if parts else spark.createDataFrame([], table_schema)
        ids = ",".join(dict.fromkeys(d.increment_id for d in seen))
        failpoint("increment.write")
        if new:
            commit = create_with_deltas(spark, ident, table_schema, frame, [d.delta_num for d in seen],
                                        partition_by=["delta_num"], extra_summary={"deltaport.increment-id": ids})
        else:
            commit = replace_deltas(spark, ident, frame, [d.delta_num for d in seen],
                                    extra_summary={"deltaport.increment-id": ids}, schema=table_schema)
        failpoint("increment.table_committed")
        out = []
        for d in seen:
            rows, deletes = (0, 0)
            if d.delta_num in counted:
                got = counted[d.delta_num]()
                if got is None:  # the write's count never reached the client: read back what it committed
                    back = counted_back(spark, ident, d.delta_num, "sys_op", {"deletes": 1})
                    got = back["rows"], back["deletes"]
                rows, deletes = got
            out.append((d.delta_num, TableStats(name, rows, rows - deletes, deletes)))
        return ident, commit, out

    # The tables go side by side: a table's write from the client's rows spends much of its
    # time converting them on the server's driver, one thread per write, which another table's
    # write can overlap.
    tables_of = {d.delta_num: data_tables(d.entities) for d in deltas}  # not once per table: 500 x 500
    names = sorted({n for d in deltas for n in tables_of[d.delta_num]})

    def known() -> frozenset[str]:
        return unchanged.result() if isinstance(unchanged, Future) else unchanged

    def idle(name: str) -> bool:
        return all(d.frames.get(name) is None for d in deltas)

    stats: dict[int, list[TableStats]] = {d.delta_num: [] for d in deltas}
    commits: dict[str, str] = {}  # per table: its commit, and the rows its write sent
    written: dict[str, int] = {}
    first = sorted(names, key=idle)  # the tables with rows first: they need not wait for `known`
    landed = dict(zip(first, side_by_side(land_table, [(n,) for n in first])))
    for ident, commit, table_stats in (landed[n] for n in names):
        if commit is not None:
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

    # Imported here: the Kafka reader brings polars and confluent-kafka, which a read of the lake
    # (`deltaport read`, which imports this module for its layout) never uses.
    from resources.codecs.arrow_rows import SYS_OP
    from resources.spark.kafka_reader import local_frame, output_spark_schema

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
        # None when the observation never reached the client: Spark 4.1.1's client waits only 100 ms
        # for it (SPARK-54279), which a loaded server misses; the caller then counts the commit back.
        counted[d.delta_num] = lambda o=observed: ((int(o.get["rows"]), int(o.get["deletes"]))
                                                   if "rows" in o.get else None)
        parts.append(_table_columns(got.withColumn("delta_num", F.lit(d.delta_num).cast("long"))
                                    .withColumn("delta_date", F.timestamp_micros(F.lit(d.delta_date_us))
                                                .cast("timestamp_ntz")), table_schema))
    for struct, tables in local.values():
        parts.append(_table_columns(local_frame(spark, pa.concat_tables(tables).combine_chunks(), struct),
                                    table_schema, columns=struct.names))
    return parts, counted


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


def landed_deltas(spark, layout: LakeLayout, datamart: str, since: int | None = None,
                  until: int | None = None) -> dict[int, dict[str, TableStats]]:
    """{delta: {table: stats}} of every increment recorded in the manifest; with `since`, of the
    deltas >= since only, with `until` those <= until (as `changelog_history`)."""
    from pyspark.sql import functions as F

    ident = layout.meta(datamart, "manifest")
    if not table_exists(spark, ident):
        return {}
    out: dict[int, dict[str, TableStats]] = {}
    frame = _since(spark.table(ident), since)
    frame = frame if until is None else frame.where(F.col("delta_num") <= until)
    for r in frame.collect():
        tables = out.setdefault(r.delta_num, {})
        if r.table_name is not None:
            tables[r.table_name] = TableStats(r.table_name, r.rows, r.upserts, r.deletes)
    return out
