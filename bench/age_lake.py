"""Age a datamart's lake cheaply: deltas first..last-1 written as a long run of real deltas
would leave them, in a few commits per table instead of one commit or more per delta.

The lake must hold real deltas up to first-1 (landed through `sync`); the generated deltas
come after them, and the real deltas the emulator numbers from `last` on (EmulatorConfig's
`number_gap`) land after them through `sync` as usual. Each generated delta is a tiny one:
it re-writes one row of every data table with the values it already has (an update that
changes nothing a reader sees), so every table's state stays the emulator's truth at first-1
and a read as of any generated delta can be checked against it.

What it writes, per generated delta d (the same tables, rows and partitions a real run adds):
- `lake.<dm>_increment.<t>`: partition d, one row per table (sys_op 0, the row's values, the
  Kafka coordinates -1: no message carried it);
- `lake.<dm>_meta.manifest`: one row per table (1 row, 1 upsert); `changelog`: the DDL records
  of delta first-1, under delta d (each delta's backup carries the whole changelog);
  `signal_events`: delta first-1's events under delta d (their close time d's);
- `lake.<dm>_history.<t>` and the snapshot table: written by the platform's own range folds
  (`apply_snapshots`, the path a range run takes, `FOLD` deltas each): the history rows of d hold the version
  d closed, the snapshot row carries its last `sys_from`;
- the snapshot tables' `delta_<N>` tags of the last `keep_tags` generated deltas, then one
  maintenance pass (`maintain_source`, expiry as for commits older than an hour), as a run
  crossing a multiple of `every_deltas` leaves the tables;
- the delta index: every generated delta closed (`deltas`), and the sync cursor past them;
- Dagster: the dynamic partition of each delta, and a materialization of `<dm>/snapshot` for
  the last `events` of them (what `landed_through`, the lag and the UI read).

How it differs from a real run: increment, manifest, changelog and signal_events commits hold
`chunk` deltas each (a real lake: one commit per delta or per range run), so before expiry
their metadata logs are shorter, and their manifests hold `chunk` files each where a real
lake's merged ones hold up to Iceberg's merge target; the snapshot and history of the
generated deltas are one fold commit per `FOLD` deltas, so the tags of the last generated deltas
point at one commit (a real lake's point at one commit each: its metadata file then lists
keep_tags snapshots, this one fewer); the delta index has no backup messages or signal events for the
generated deltas (the sensor and the lag read `deltas` and those tables by delta, from their
cursor); Dagster has no runs, no events for the other assets, and materializations of the
snapshot for the last `events` generated partitions only.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from dataclasses import dataclass

import dagster as dg

from platform_assets.config import maintenance_settings
from platform_assets.definitions import index_resource
from platform_assets.deltas.partitions import delta_partitions, partition_key
from resources.lake.maintenance import maintain_source
from resources.lake.maintenance_settings import MaintenanceSettings
from resources.lake.layout import LakeLayout
from resources.lake.prostore import changelog_history, data_tables
from resources.lake.prostore_snapshot import apply_snapshots
from resources.codecs.ddl import replay_changelog
from resources.spark.iceberg import delta_tag, replace_deltas
from resources.state.cursors import SyncCursors
from resources.state.store import state_store


_FANOUT = "write.spark.fanout.enabled"
FOLD = 2000  # deltas per range fold of the snapshot and history (a real lake's: sensor.max_deltas_per_run, 100)


@dataclass
class Aged:
    first: int
    last: int  # the first delta not generated
    seconds: dict


def _dates_us(before: dt.datetime, after: dt.datetime, first: int, last: int) -> dict[int, int]:
    """Close times of the generated deltas, evenly between the real deltas around them (naive UTC)."""
    lo = int((before - dt.datetime(1970, 1, 1)).total_seconds() * 1e6)
    hi = int((after - dt.datetime(1970, 1, 1)).total_seconds() * 1e6)
    step = (hi - lo) / (last - first + 1)
    return {d: lo + int(step * (d - first + 1)) for d in range(first, last)}


def age_lake(spark, cfg, instance: dg.DagsterInstance, datamart: str, *, first: int, last: int,
             before: dt.datetime, after: dt.datetime, chunk: int = 5000, events: int = 2000,
             echo=print) -> Aged:
    """Write deltas first..last-1 (module docstring). `before`, `after`: close times of deltas
    first-1 and last (the generated ones fall evenly between). `events`: the last this many
    generated partitions get a Dagster materialization (SQLite's event log stores one event per
    transaction, 60 ms each on the bench machine: 20 minutes for 20,000)."""
    from pyspark.sql import functions as F
    from pyspark.sql import Window

    layout, seconds = LakeLayout(cfg.lake.catalog), {}
    dates = _dates_us(before, after, first, last)
    date_rows = spark.createDataFrame([(d, us) for d, us in dates.items()], "delta_num long, us long")
    date_rows = date_rows.withColumn("delta_date", F.timestamp_micros("us").cast("timestamp_ntz")).cache()
    ids = {d: str(uuid.UUID(int=d, version=4)) for d in dates}
    records = changelog_history(spark, layout, datamart, since=first - 1)[first - 1]
    tables = data_tables(replay_changelog(records))
    chunks = [list(range(a, min(a + chunk, last))) for a in range(first, last, chunk)]

    def timed(name, fn):
        began = time.perf_counter()
        out = fn()
        seconds[name] = round(time.perf_counter() - began, 2)
        echo(f"  aging: {name} {seconds[name]} s")
        return out

    def write(ident: str, frame):
        # Two tasks (the machine's cores) each write a run of consecutive deltas of a chunk,
        # sorted, one file open at a time (Iceberg's fanout writer, its default for writes without
        # an ordering, would hold a file open per delta); the table property is unset again after.
        spark.sql(f"ALTER TABLE {ident} SET TBLPROPERTIES ('{_FANOUT}'='false')")
        try:
            for part in chunks:  # one commit per chunk of deltas, each delta its own partition
                rows = frame.where(F.col("delta_num").between(part[0], part[-1])).repartitionByRange(
                    2, "delta_num").sortWithinPartitions("delta_num")
                replace_deltas(spark, ident, rows, part)
        finally:
            spark.sql(f"ALTER TABLE {ident} UNSET TBLPROPERTIES ('{_FANOUT}')")

    def increments():
        for name, entity in sorted(tables.items()):
            snap = spark.table(layout.snapshot(datamart, name))
            n = snap.count()
            numbered = snap.withColumn("_i", F.row_number().over(
                Window.orderBy(*[F.col(f"`{k}`") for k in entity.primary_key])) - 1)
            target = spark.table(layout.increment(datamart, name)).schema
            picked = date_rows.withColumn("_i", F.col("delta_num") % n).join(numbered, "_i")
            have = set(picked.columns)
            extra = {"sys_op": F.lit(0), "_kafka_partition": F.lit(-1), "_kafka_offset": F.lit(-1)}
            cols = [(extra[f.name] if f.name in extra else F.col(f"`{f.name}`") if f.name in have
                     else F.lit(None)).cast(f.dataType).alias(f.name) for f in target.fields]
            write(layout.increment(datamart, name), picked.select(*cols))

    def meta():
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        manifest = spark.table(layout.meta(datamart, "manifest")).schema
        rows = [(d, t, 1, 1, 0, ids[d], dates[d], json.dumps({"generated": True})) for d in dates for t in tables]
        write(layout.meta(datamart, "manifest"), spark.createDataFrame(rows, manifest))
        schema = StructType([StructField("delta_num", LongType()), StructField("increment_id", StringType())])
        ident_rows = spark.createDataFrame([(d, ids[d]) for d in dates], schema)
        log = spark.table(layout.meta(datamart, "changelog")).where(F.col("delta_num") == first - 1).drop(
            "delta_num", "increment_id")
        write(layout.meta(datamart, "changelog"), ident_rows.crossJoin(log).select(
            *spark.table(layout.meta(datamart, "changelog")).columns))
        events = spark.table(layout.meta(datamart, "signal_events"))
        old = events.where(F.col("delta_num") == first - 1).drop("delta_num")
        write(layout.meta(datamart, "signal_events"), date_rows.select("delta_num", F.col("delta_date").alias("_d"))
              .crossJoin(old).withColumn("delta_date", F.when(F.col("delta_date").isNotNull(), F.col("_d")))
              .select(*events.columns))

    timed("increment tables", increments)
    timed("manifest, changelog, signal_events", meta)
    def folds():
        # Range folds of FOLD deltas. With a partition per delta, one fold of 4,900 ran the server
        # (-Xmx4g) out of heap writing the history (Iceberg's fanout writer held a file open per
        # delta); spans of deltas (resources/lake/history_layout.py) leave two or three per task.
        for target in [*range(first + FOLD - 1, last - 1, FOLD), last - 1]:
            apply_snapshots(spark, layout, datamart, target)

    timed(f"history and snapshot (range folds of {FOLD} deltas)", folds)
    settings = maintenance_settings(cfg) or MaintenanceSettings()

    def tags():
        for name in tables:
            ident = layout.snapshot(datamart, name)
            for d in range(max(first, last - settings.keep_tags), last - 1):
                spark.sql(f"ALTER TABLE {ident} CREATE OR REPLACE TAG `{delta_tag(d)}`")

    timed(f"tags of the last {settings.keep_tags} deltas", tags)
    timed("maintenance", lambda: maintain_source(spark, cfg.lake.catalog, datamart, settings))
    timed("delta index and sync cursor", lambda: _index(cfg, datamart, dates, last))
    timed("Dagster partitions and materializations", lambda: _dagster(instance, datamart, dates, events))
    return Aged(first, last, seconds)


def _index(cfg, datamart: str, dates: dict[int, int], last: int) -> None:
    index = index_resource(cfg).get()
    rows = [(datamart, d, "closed", (dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
                                     + dt.timedelta(microseconds=us)).isoformat()) for d, us in dates.items()]
    with index._transaction() as db:
        db.executemany("INSERT INTO deltas (datamart, delta_num, status, delta_date, attempts) VALUES (?,?,?,?,1)",
                       rows)
    cursors = SyncCursors(state_store(cfg.state_url("index"), cfg.state_password_env))
    cursor = json.loads(cursors.get(datamart) or "{}")
    cursors.put(datamart, json.dumps({**cursor, "next": last}))


def _dagster(instance: dg.DagsterInstance, datamart: str, dates: dict[int, int], events: int) -> None:
    keys = [partition_key(d) for d in dates]
    instance.add_dynamic_partitions(delta_partitions(datamart).name, keys)
    snapshot = dg.AssetKey([datamart, "snapshot"])
    for key in keys[-events:] if events else []:
        instance.report_runless_asset_event(dg.AssetMaterialization(snapshot, partition=key,
                                                                    metadata={"generated": True}))
