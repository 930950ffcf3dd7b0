"""The assets of one change-stream source (Qlik Replicate, DataWorks, Datastream), partitioned by delta.

Lineage: kafka/<topic> -> changelog[N] -> increment[N] -> snapshot[N] (increment also reads the
topic), the same shape as a Prostore datamart's group (which adds signal_events). Delta N is
the offset ranges the source's sealing sensor wrote in the ledger; the topic IO manager hands
them over (`StreamSlice`) and each asset reads them itself.

- changelog[N]: table structures, DDL events and the key columns of every table with changes
  (resources/lake/stream_changelog.py) in `lake.<source>_meta.changelog`.
- increment[N]: the decoded row changes, one Iceberg table per source table
  (`lake.<source>_increment.<namespace>_<table>`), with the format's order key, event id,
  captured columns, before-images kept for audit (resources/lake/cdc.py). Bad messages of the
  delta were quarantined by the sensor when it sealed it: they are counted and named here, the
  good ones land.
- snapshot[N]: every table brought to delta N by the format's own order, duplicates and late
  changes dropped, one commit per table per delta tagged delta_<N>; every missing delta up to N
  is applied in order.

Guarantees: re-materializing N rewrites exactly N's changelog and increment rows (the ledger
makes N the same offsets forever); a snapshot already at N or later is left as is.
"""


import time
from collections import Counter

import dagster as dg

from platform_assets.config import StreamConfig
from platform_assets.prostore.assets import asset_failure, topic_key
from platform_assets.prostore.partitions import delta_of, delta_partitions
from platform_assets.streams import checks
from resources.codecs.cdc import BEFORE_IMAGE
from resources.errors import DecodeError, DeltaportError
from resources.kafka.stream_io_manager import StreamSlice
from resources.lake.cdc import apply_cdc_through, changes_frame, increment_columns, infer_columns, land_cdc_increment
from resources.lake.prostore import LakeLayout, MissingDeltasError
from resources.lake.stream_changelog import (
    changelog_entries,
    changes_by_table,
    land_stream_changelog,
    table_keys,
)
from resources.spark.resource import SparkResource

STREAM_IO = "stream_topic_io"
MAX_ERRORS_SHOWN = 5


def _read(context, stream: StreamSlice) -> tuple[list[tuple[int, int, list]], list[str], int]:
    """The delta's decoded messages [(partition, offset, records)], the bad ones (located), and
    how many messages were read."""
    good, bad, read = [], [], 0
    for msg, records in stream.read():
        read += 1
        if isinstance(records, DecodeError):
            bad.append(str(records))
        else:
            good.append((msg.partition, msg.offset, records))
    if bad:
        context.log.warning(f"delta {stream.delta_num}: {len(bad)} bad message(s), quarantined when sealed; "
                            f"first: {bad[0]}")
    return good, bad, read


def build_stream_assets(*, stream: StreamConfig, layout: LakeLayout) -> list:
    src = stream.name
    parts = delta_partitions(src)
    topic_in = dg.AssetIn(key=topic_key(stream.topic), metadata={"source": src, "format": stream.format})
    common = dict(group_name=src, partitions_def=parts, pool=f"deltaport_{src}")
    changelog_key, increment_key = dg.AssetKey([src, "changelog"]), dg.AssetKey([src, "increment"])
    snapshot_key = dg.AssetKey([src, "snapshot"])

    @dg.asset(key=changelog_key, ins={"topic": topic_in}, kinds={"kafka", "spark", "iceberg"},
              description=f"Table structures, DDL events and key columns of each delta of {src} "
                          f"({stream.format}), in {layout.meta(src, 'changelog')}.", **common)
    def changelog(context: dg.AssetExecutionContext, topic: StreamSlice, spark: SparkResource):
        try:
            good, bad, _ = _read(context, topic)
            entries = changelog_entries(good)
            ident = land_stream_changelog(spark.get_session(), layout, src, topic.delta_num, entries)
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        return dg.MaterializeResult(metadata={
            "entries": dict(Counter(e.kind for e in entries)), "table": ident,
            "tables": sorted({e.table for e in entries if e.table}), "bad_messages": len(bad)})

    @dg.asset(key=increment_key, ins={"topic": topic_in}, deps=[changelog_key], kinds={"kafka", "spark", "iceberg"},
              check_specs=checks.increment_check_specs(increment_key),
              description=f"Raw changes of each delta of {src} ({stream.format}), one Iceberg table per source "
                          f"table ({layout.increment(src, '<namespace>_<table>')}), with the format's order key.",
              **common)
    def increment(context: dg.AssetExecutionContext, topic: StreamSlice, spark: SparkResource):
        session = spark.get_session()
        started = time.monotonic()
        n = topic.delta_num
        try:
            good, bad, read = _read(context, topic)
            by_table = changes_by_table(r for _, _, records in good for r in records)
            frames = {t: changes_frame(session, chs, infer_columns(chs, increment_columns(session, layout, src, t)))
                      for t, chs in by_table.items()}
            stats = land_cdc_increment(session, layout, src, n, frames, delta_date_us=topic.delta.watermark_us,
                                       increment_id=f"{src}:{n}",
                                       provenance={"topic": topic.topic, "offsets": topic.offsets(),
                                                   "sealed_at": topic.delta.sealed_at, "reason": topic.delta.reason})
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        decoded = {t: sum(1 for c in chs if c.operation != BEFORE_IMAGE) for t, chs in by_table.items()}
        context.log.info(f"delta {n}: " + (", ".join(f"{s.table} {s.rows}" for s in stats) or "no row change"))
        meta = {
            "rows": sum(s.upserts + s.deletes for s in stats), "upserts": sum(s.upserts for s in stats),
            "deletes": sum(s.deletes for s in stats), "before_images": sum(s.before_images for s in stats),
            **{f"rows/{s.table}": s.upserts + s.deletes for s in stats},
            "offsets": topic.offsets(), "messages": read, "bad_messages": len(bad),
            "bad_examples": bad[:MAX_ERRORS_SHOWN], "sealed_because": topic.delta.reason or "",
            "seconds": round(time.monotonic() - started, 3),
        }
        if topic.delta.watermark_us is not None:
            meta["watermark"] = dg.TimestampMetadataValue(topic.delta.watermark_us / 1e6)
        return dg.MaterializeResult(
            metadata=meta,
            check_results=checks.increment_checks(session, layout, src, topic, read, decoded, stats))

    @dg.asset(key=snapshot_key, deps=[increment_key, changelog_key], kinds={"spark", "iceberg"},
              check_specs=checks.snapshot_check_specs(snapshot_key),
              description=f"State of every table of {src} as of each delta ({layout.snapshot(src, '<table>')}): "
                          f"changes applied by {stream.format}'s own order, duplicates and late changes dropped, "
                          "deletes kept as tombstones; tagged delta_<N>.", **common)
    def snapshot(context: dg.AssetExecutionContext, spark: SparkResource):
        session = spark.get_session()
        n = delta_of(context.partition_key)
        started = time.monotonic()
        try:
            keys = table_keys(session, layout, src, n)
            applied = apply_cdc_through(session, layout, src, n, keys)
        except MissingDeltasError as exc:
            raise dg.Failure(description=str(exc), metadata={"missing_deltas": exc.missing}) from exc
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        counts, results = checks.snapshot_checks(session, layout, src, n, keys)
        return dg.MaterializeResult(
            metadata={"applied_deltas": sorted({a.delta_num for a in applied if not a.skipped}),
                      "events_applied": sum(a.events for a in applied),
                      **{f"rows/{t}": c for t, c in counts.items()}, "rows": sum(counts.values()),
                      "seconds": round(time.monotonic() - started, 3)},
            check_results=results)

    return [changelog, increment, snapshot]


__all__ = ["STREAM_IO", "build_stream_assets"]
