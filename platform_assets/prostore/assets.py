"""The assets of one Prostore datamart, all partitioned by delta.

Lineage: kafka/<signal topic> -> signal_events[N]; kafka/<backup topic> -> changelog[N] ->
increment[N] -> snapshot[N] (increment also reads the backup topic). Topic slices come in
through the Kafka IO managers (the delta's offsets, from the delta index); each asset writes
its Iceberg tables itself (resources/lake/prostore.py) and reports what it wrote as metadata.

Guarantees: re-materializing partition N rewrites exactly N's rows of signal_events,
changelog and increment; snapshot[N] applies every missing delta up to N in order, never one
twice, or fails naming the deltas whose increments have not landed.
"""


import time

import dagster as dg

from platform_assets.config import DatamartConfig
from platform_assets.prostore import checks
from platform_assets.prostore.partitions import delta_of, delta_partitions
from platform_assets.prostore.signal_rows import signal_frame
from resources.codecs.backup import iter_changelog
from resources.codecs.ddl import replay_changelog
from resources.errors import DeltaportError
from resources.index_resource import DeltaIndexResource
from resources.kafka.fetch import fetch_values
from resources.kafka.io_managers import BackupSlice, SignalSlice
from resources.lake.prostore import LakeLayout, MissingDeltasError, apply_snapshots, data_tables, land_changelog, land_increment
from resources.spark.iceberg import commit_delta, ensure_table
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


def build_datamart_assets(*, datamart: DatamartConfig, layout: LakeLayout) -> list:
    dm = datamart.name
    parts = delta_partitions(dm)
    signal_in = dg.AssetIn(key=topic_key(datamart.signal_topic), metadata={"datamart": dm})
    backup_in = dg.AssetIn(key=topic_key(datamart.backup_topic), metadata={"datamart": dm})
    common = dict(group_name=dm, partitions_def=parts, pool=f"deltaport_{dm}")
    changelog_key, increment_key = dg.AssetKey([dm, "changelog"]), dg.AssetKey([dm, "increment"])

    @dg.asset(key=[dm, "signal_events"], ins={"signal": signal_in}, kinds={"kafka", "spark", "iceberg"},
              description=f"Signal events of each delta of {dm} (DELTA_OPEN .. DELTA_CLOSE, WRITE_*, DDL), "
                          f"de-duplicated by eventLogId, in {layout.meta(dm, 'signal_events')}.", **common)
    def signal_events(context: dg.AssetExecutionContext, signal: SignalSlice, spark: SparkResource):
        session = spark.get_session()
        n = delta_of(context.partition_key)
        frame = signal_frame(session, signal)
        ident = layout.meta(dm, "signal_events")
        ensure_table(session, ident, frame.schema, partition_by=["delta_num"])
        commit_delta(session, ident, frame, delta_num=n, mode="replace_delta", tag=False)
        codes: dict[str, int] = {}
        for e in signal.events:
            codes[e["code"]] = codes.get(e["code"], 0) + 1
        return dg.MaterializeResult(metadata={"events": len(signal.events), "by_code": codes, "table": ident,
                                              "attempts": max((e["attempt"] or 0 for e in signal.events), default=0)})

    @dg.asset(key=changelog_key, ins={"backup": backup_in}, kinds={"kafka", "spark", "iceberg"},
              description=f"The schema changelog shipped with each increment of {dm}, parsed into entity "
                          f"schemas, in {layout.meta(dm, 'changelog')}.", **common)
    def changelog(context: dg.AssetExecutionContext, backup: BackupSlice, spark: SparkResource):
        try:
            records = _changelog_records(backup)
            entities = land_changelog(spark.get_session(), layout, dm, backup.delta_num, backup.report.chosen, records)
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        return dg.MaterializeResult(metadata={
            "records": len(records), "tables": sorted(data_tables(entities)),
            "views": sorted(n for n, e in entities.items() if e.kind != "table"),
            "increment_id": backup.report.chosen})

    @dg.asset(key=increment_key, ins={"backup": backup_in}, deps=[changelog_key], kinds={"kafka", "spark", "iceberg"},
              check_specs=checks.increment_check_specs(increment_key),
              description=f"Raw changes of each delta of {dm}, one Iceberg table per logical table "
                          f"({layout.increment(dm, '<table>')}), with sys_op, delta_num and delta_date.", **common)
    def increment(context: dg.AssetExecutionContext, backup: BackupSlice, spark: SparkResource,
                  index: DeltaIndexResource):
        session = spark.get_session()
        started = time.monotonic()
        try:
            records = _changelog_records(backup)
            entities = replay_changelog(records)
            frames = {}
            for name, entity in data_tables(entities).items():
                refs = backup.table_refs(name)
                if refs:
                    frames[name] = table_changes(session, backup.bootstrap, backup.topic, refs, entity.columns,
                                                 consumer_config=backup.consumer_config, timeout=backup.timeout,
                                                 value_bytes=sum(r.value_bytes for r in refs))
            with task_errors():  # a bad message read by a Spark task surfaces as our typed error
                stats = land_increment(session, layout, dm, backup.delta_num, backup.report.delta_date,
                                       backup.report.chosen, entities, frames,
                                       provenance={"topic": backup.topic, "offsets": backup.offsets()})
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        seconds = time.monotonic() - started
        context.log.info(f"delta {backup.delta_num}: " + ", ".join(f"{s.table} {s.rows}" for s in stats))
        return dg.MaterializeResult(
            metadata={
                "rows": sum(s.rows for s in stats), "upserts": sum(s.upserts for s in stats),
                "deletes": sum(s.deletes for s in stats),
                **{f"rows/{s.table}": s.rows for s in stats},
                "delta_date": dg.TimestampMetadataValue(backup.report.delta_date / 1e6),
                "increment_id": backup.report.chosen, "offsets": backup.offsets(), "bytes": backup.value_bytes,
                "seconds": round(seconds, 3), "messages": len(backup.refs),
            },
            check_results=checks.increment_checks(session, layout, dm, backup, entities, stats, index.get()),
        )

    @dg.asset(key=[dm, "snapshot"], deps=[increment_key, changelog_key], kinds={"spark", "iceberg"},
              check_specs=checks.snapshot_check_specs(dg.AssetKey([dm, "snapshot"])),
              description=f"State of every table of {dm} as of each delta ({layout.snapshot(dm, '<table>')}): "
                          "upsert on sys_op 0, delete on 1, by the DDL's primary key; tagged delta_<N>.", **common)
    def snapshot(context: dg.AssetExecutionContext, spark: SparkResource):
        session = spark.get_session()
        n = delta_of(context.partition_key)
        started = time.monotonic()
        try:
            applied = apply_snapshots(session, layout, dm, n)
        except MissingDeltasError as exc:
            raise dg.Failure(description=str(exc), metadata={"missing_deltas": exc.missing}) from exc
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        counts, results = checks.snapshot_checks(session, layout, dm, n)
        return dg.MaterializeResult(
            metadata={"applied_deltas": sorted({a.delta_num for a in applied}), **{f"rows/{t}": c for t, c in counts.items()},
                      "rows": sum(counts.values()), "seconds": round(time.monotonic() - started, 3)},
            check_results=results,
        )

    return [signal_events, changelog, increment, snapshot]
