"""The assets of one Prostore datamart, all partitioned by delta.

Lineage: kafka/<signal topic> -> signal_events[N]; kafka/<backup topic> -> changelog[N] ->
increment[N] -> snapshot[N] (increment also reads the backup topic). A backup-only datamart (no
signal topic) has no signal_events. Topic slices come in
through the Kafka IO managers (the delta's offsets, from the delta index); each asset writes
its Iceberg tables itself (resources/lake/prostore.py) and reports what it wrote as metadata.

A run covers one delta or a range of consecutive deltas (sensor, `sync`, UI backfill): the
IO managers hand each asset one slice per delta; signal_events, changelog, increment and the
manifest take the whole range in one commit per table; snapshot folds the range into one
MERGE per table (each key's last change; split where a table's columns change), tagged with
its last delta; reading as of any N inside is exact (the commit's parent plus the increments).

Guarantees: re-materializing partition N (or a range) rewrites exactly its rows of
signal_events, changelog and increment; snapshot[N] applies every missing delta up to N in
order, never one twice, or fails naming the deltas whose increments have not landed.
"""


import time
from collections import Counter

import dagster as dg

from platform_assets.config import DatamartConfig
from platform_assets.prostore import checks
from platform_assets.prostore.partitions import delta_partitions, delta_span, run_deltas
from platform_assets.prostore.signal_rows import signal_frame
from resources.codecs.backup import iter_changelog
from resources.codecs.ddl import replay_changelog
from resources.errors import DeltaportError
from resources.prostore.resource import DeltaIndexResource
from resources.kafka.fetch import fetch_values
from resources.kafka.io_managers import BackupSlice, SignalSlice
from resources.lake.prostore import (
    IncrementDelta,
    LakeLayout,
    MissingDeltasError,
    apply_snapshots,
    changelog_history,
    data_tables,
    land_changelogs,
    land_increments,
)
from resources.spark.iceberg import ensure_table, replace_deltas
from resources.spark.kafka_reader import table_changes, task_errors
from resources.spark.resource import SparkResource

SIGNAL_IO, BACKUP_IO = "signal_topic_io", "backup_topic_io"


def topic_key(topic: str) -> dg.AssetKey:
    return dg.AssetKey(["kafka", topic])


def asset_failure(context, exc: Exception) -> dg.Failure:
    return dg.Failure(description=f"{context.asset_key.to_user_string()}[{context.partition_key}]: {exc}",
                      metadata={"error": type(exc).__name__})


def _changelog_records(backup: BackupSlice):
    refs = backup.changelog_refs()
    values = fetch_values(backup.bootstrap, backup.topic, [(r.partition, r.offset) for r in refs],
                          config=backup.consumer_config, timeout=backup.timeout)
    records = []
    for r in refs:
        records += list(iter_changelog(values[(r.partition, r.offset)]))
    return records


def build_datamart_assets(*, datamart: DatamartConfig, layout: LakeLayout, max_deltas_per_run: int = 1) -> list:
    dm = datamart.name
    parts = delta_partitions(dm)
    boot = datamart.bootstrap
    # With a bootstrap, the IO manager serves the deltas the snapshot covers from its topic.
    backup_in = dg.AssetIn(key=topic_key(datamart.backup_topic), metadata={
        "datamart": dm, **({"bootstrap_topic": boot.topic, "bootstrap_last_delta": boot.last_delta} if boot else {})})
    snapshot_deps = [topic_key(boot.topic)] if boot else []  # lineage: the snapshot topic feeds them too
    common = dict(group_name=dm, partitions_def=parts, pool=f"deltaport_{dm}",
                  backfill_policy=dg.BackfillPolicy.multi_run(max_deltas_per_run))
    changelog_key, increment_key = dg.AssetKey([dm, "changelog"]), dg.AssetKey([dm, "increment"])

    @dg.asset(key=changelog_key, ins={"backup": backup_in}, deps=snapshot_deps, kinds={"kafka", "spark", "iceberg"},
              description=f"The schema changelog shipped with each increment of {dm}, parsed into entity "
                          f"schemas, in {layout.meta(dm, 'changelog')}.", **common)
    def changelog(context: dg.AssetExecutionContext, backup: list[BackupSlice], spark: SparkResource):
        try:
            records = {b.delta_num: _changelog_records(b) for b in backup}
            landed = land_changelogs(spark.get_session(), layout, dm,
                                     [(b.delta_num, b.report.chosen, records[b.delta_num]) for b in backup])
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        entities = landed[backup[-1].delta_num]
        return dg.MaterializeResult(metadata={
            "records": sum(len(r) for r in records.values()), "tables": sorted(data_tables(entities)),
            "views": sorted(n for n, e in entities.items() if e.kind != "table"), "deltas": delta_span(backup),
            "increment_id": backup[-1].report.chosen})

    @dg.asset(key=increment_key, ins={"backup": backup_in}, deps=[changelog_key, *snapshot_deps],
              kinds={"kafka", "spark", "iceberg"},
              check_specs=checks.increment_check_specs(increment_key),
              description=f"Raw changes of each delta of {dm}, one Iceberg table per logical table "
                          f"({layout.increment(dm, '<table>')}), with sys_op, delta_num and delta_date.", **common)
    def increment(context: dg.AssetExecutionContext, backup: list[BackupSlice], spark: SparkResource,
                  index: DeltaIndexResource):
        session = spark.get_session()
        started = time.monotonic()
        try:
            todo = [_increment_delta(session, b) for b in backup]
            with task_errors():  # a bad message read by a Spark task surfaces as our typed error
                stats = land_increments(session, layout, dm, todo)
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        seconds = time.monotonic() - started
        rows: Counter = Counter()
        for b in backup:
            rows.update({s.table: s.rows for s in stats[b.delta_num]})
            context.log.info(f"delta {b.delta_num}: " + ", ".join(f"{s.table} {s.rows}" for s in stats[b.delta_num]))
        every = [s for b in backup for s in stats[b.delta_num]]
        last = backup[-1]
        return dg.MaterializeResult(
            metadata={
                "rows": sum(s.rows for s in every), "upserts": sum(s.upserts for s in every),
                "deletes": sum(s.deletes for s in every), **{f"rows/{t}": c for t, c in sorted(rows.items())},
                "delta_date": dg.TimestampMetadataValue(last.report.delta_date / 1e6), "deltas": delta_span(backup),
                "increment_id": last.report.chosen, "offsets": _offsets(backup),
                "bytes": sum(b.value_bytes for b in backup), "seconds": round(seconds, 3),
                "messages": sum(len(b.refs) for b in backup),
            },
            check_results=checks.increment_checks(session, layout, dm, [(b, t.entities, stats[b.delta_num])
                                                                        for b, t in zip(backup, todo)], index.get()),
        )

    @dg.asset(key=[dm, "snapshot"], deps=[increment_key, changelog_key], kinds={"spark", "iceberg"},
              check_specs=checks.snapshot_check_specs(dg.AssetKey([dm, "snapshot"])),
              description=f"State of every table of {dm} as of each delta ({layout.snapshot(dm, '<table>')}): "
                          "upsert on sys_op 0, delete on 1, by the DDL's primary key; tagged delta_<N>.", **common)
    def snapshot(context: dg.AssetExecutionContext, spark: SparkResource):
        session = spark.get_session()
        n = run_deltas(context)[-1]  # a range run: every delta up to its last, folded per table
        started = time.monotonic()
        try:
            history = changelog_history(session, layout, dm)  # read once, for the MERGEs and the checks
            applied = apply_snapshots(session, layout, dm, n, history=history)
        except MissingDeltasError as exc:
            raise dg.Failure(description=str(exc), metadata={"missing_deltas": exc.missing}) from exc
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        counts, results = checks.snapshot_checks(session, layout, dm, n, history=history)
        return dg.MaterializeResult(
            metadata={"applied_deltas": sorted({a.delta_num for a in applied}), **{f"rows/{t}": c for t, c in counts.items()},
                      "rows": sum(counts.values()), "seconds": round(time.monotonic() - started, 3)},
            check_results=results,
        )

    landing = [changelog, increment, snapshot]
    if datamart.backup_only:  # no signal topic: nothing to land as signal events
        return landing
    return [_signal_events_asset(datamart, layout, common), *landing]


def _signal_events_asset(datamart: DatamartConfig, layout: LakeLayout, common: dict):
    dm = datamart.name
    signal_in = dg.AssetIn(key=topic_key(datamart.signal_topic), metadata={"datamart": dm})

    @dg.asset(key=[dm, "signal_events"], ins={"signal": signal_in}, kinds={"kafka", "spark", "iceberg"},
              description=f"Signal events of each delta of {dm} (DELTA_OPEN .. DELTA_CLOSE, WRITE_*, DDL), "
                          f"de-duplicated by eventLogId, in {layout.meta(dm, 'signal_events')}.", **common)
    def signal_events(context: dg.AssetExecutionContext, signal: list[SignalSlice], spark: SparkResource):
        session = spark.get_session()
        frame = signal_frame(session, signal)
        ident = layout.meta(dm, "signal_events")
        ensure_table(session, ident, frame.schema, partition_by=["delta_num"])
        replace_deltas(session, ident, frame, [s.delta_num for s in signal])
        events = [e for s in signal for e in s.events]
        return dg.MaterializeResult(metadata={"events": len(events), "by_code": dict(Counter(e["code"] for e in events)),
                                              "table": ident, "deltas": delta_span(signal),
                                              "attempts": max((e["attempt"] or 0 for e in events), default=0)})

    return signal_events


def _increment_delta(session, backup: BackupSlice) -> IncrementDelta:
    """One delta's increment: its changelog's schema and a frame per table with changes (a small
    delta's rows read now, as Arrow, so a range sends them to Spark at once; a big one's read
    from Kafka by Spark tasks when the frame is evaluated)."""
    entities = replay_changelog(_changelog_records(backup))
    frames = {}
    for name, entity in data_tables(entities).items():
        refs = backup.table_refs(name)
        if refs:
            frames[name] = table_changes(session, backup.bootstrap, backup.topic, refs, entity.columns,
                                         consumer_config=backup.consumer_config, timeout=backup.timeout,
                                         value_bytes=sum(r.value_bytes for r in refs), local_as_arrow=True)
    return IncrementDelta(backup.delta_num, backup.report.delta_date, backup.report.chosen, entities, frames,
                          {"topic": backup.topic, "offsets": backup.offsets()})


def _offsets(backups: list[BackupSlice]) -> dict[int, list[int]]:
    """{partition: [first, last]} offset of the run's chosen increments, for metadata."""
    out: dict[int, list[int]] = {}
    for b in backups:
        for part, (lo, hi) in b.offsets().items():
            have = out.setdefault(part, [lo, hi])
            out[part] = [min(have[0], lo), max(have[1], hi)]
    return out
