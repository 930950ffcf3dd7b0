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
  changes dropped, one commit per table per delta that changes it, tagged delta_<N>; every
  missing delta up to N is applied in order.

A run covers one delta or a range: changelog, increment and manifest take the range in one
commit per table; the snapshot folds the range into one MERGE per table (the same state as
applying its deltas in turn, resources/lake/cdc_fold.py), tagged with its last delta; reading
as of any N inside is exact (the state before the fold plus the deltas up to N).

Guarantees: re-materializing N rewrites exactly N's changelog and increment rows (the ledger
makes N the same offsets forever); a snapshot already at N or later is left as is.
"""


import time
from collections import Counter

import dagster as dg

from platform_assets.config import StreamConfig
from platform_assets.prostore.assets import asset_failure, topic_key
from platform_assets.prostore.partitions import delta_partitions, delta_span, run_deltas
from platform_assets.streams import checks
from resources.codecs.cdc import BEFORE_IMAGE
from resources.errors import DecodeError, DeltaportError
from resources.kafka.stream_io_manager import StreamSlice
from resources.lake.cdc import (
    CdcDelta,
    apply_cdc_through,
    changes_frame,
    increment_columns,
    infer_columns,
    land_cdc_increments,
)
from resources.lake.prostore import LakeLayout, MissingDeltasError
from resources.lake.stream_changelog import (
    changelog_entries,
    changes_by_table,
    land_stream_changelogs,
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


def build_stream_assets(*, stream: StreamConfig, layout: LakeLayout, max_deltas_per_run: int = 1) -> list:
    src = stream.name
    parts = delta_partitions(src)
    topic_in = dg.AssetIn(key=topic_key(stream.topic), metadata={"source": src, "format": stream.format})
    common = dict(group_name=src, partitions_def=parts, pool=f"deltaport_{src}",
                  backfill_policy=dg.BackfillPolicy.multi_run(max_deltas_per_run))
    changelog_key, increment_key = dg.AssetKey([src, "changelog"]), dg.AssetKey([src, "increment"])
    snapshot_key = dg.AssetKey([src, "snapshot"])

    @dg.asset(key=changelog_key, ins={"topic": topic_in}, kinds={"kafka", "spark", "iceberg"},
              description=f"Table structures, DDL events and key columns of each delta of {src} "
                          f"({stream.format}), in {layout.meta(src, 'changelog')}.", **common)
    def changelog(context: dg.AssetExecutionContext, topic: list[StreamSlice], spark: SparkResource):
        try:
            entries, bad = {}, 0
            for delta in topic:
                good, bad_ones, _ = _read(context, delta)
                entries[delta.delta_num] = changelog_entries(good)
                bad += len(bad_ones)
            ident = land_stream_changelogs(spark.get_session(), layout, src, entries)
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        every = [e for es in entries.values() for e in es]
        return dg.MaterializeResult(metadata={
            "entries": dict(Counter(e.kind for e in every)), "table": ident, "deltas": delta_span(topic),
            "tables": sorted({e.table for e in every if e.table}), "bad_messages": bad})

    @dg.asset(key=increment_key, ins={"topic": topic_in}, deps=[changelog_key], kinds={"kafka", "spark", "iceberg"},
              check_specs=checks.increment_check_specs(increment_key),
              description=f"Raw changes of each delta of {src} ({stream.format}), one Iceberg table per source "
                          f"table ({layout.increment(src, '<namespace>_<table>')}), with the format's order key.",
              **common)
    def increment(context: dg.AssetExecutionContext, topic: list[StreamSlice], spark: SparkResource):
        session = spark.get_session()
        started = time.monotonic()
        known: dict[str, list] = {}  # each table's columns so far: the lake's, then what the run adds
        todo, reads = [], []
        try:
            for delta in topic:
                good, bad, read = _read(context, delta)
                by_table = changes_by_table(r for _, _, records in good for r in records)
                frames = {}
                for t, chs in by_table.items():
                    if t not in known:
                        known[t] = increment_columns(session, layout, src, t)
                    known[t] = infer_columns(chs, known[t])
                    frames[t] = changes_frame(session, chs, known[t])
                todo.append(CdcDelta(delta.delta_num, frames, delta.delta.watermark_us, f"{src}:{delta.delta_num}",
                                     {"topic": delta.topic, "offsets": delta.offsets(),
                                      "sealed_at": delta.delta.sealed_at, "reason": delta.delta.reason}))
                decoded = {t: sum(1 for c in chs if c.operation != BEFORE_IMAGE) for t, chs in by_table.items()}
                reads.append((delta, read, decoded, bad))
            stats = land_cdc_increments(session, layout, src, todo)
        except DeltaportError as exc:
            raise asset_failure(context, exc) from exc
        every = [s for d in topic for s in stats[d.delta_num]]
        rows: Counter = Counter()
        for d in topic:
            rows.update({s.table: s.upserts + s.deletes for s in stats[d.delta_num]})
            context.log.info(f"delta {d.delta_num}: " + (", ".join(f"{s.table} {s.rows}" for s in stats[d.delta_num])
                                                          or "no row change"))
        bad = [b for _, _, _, bs in reads for b in bs]
        last = topic[-1]
        meta = {
            "rows": sum(s.upserts + s.deletes for s in every), "upserts": sum(s.upserts for s in every),
            "deletes": sum(s.deletes for s in every), "before_images": sum(s.before_images for s in every),
            **{f"rows/{t}": c for t, c in sorted(rows.items())}, "deltas": delta_span(topic),
            "offsets": last.offsets() if len(topic) == 1 else {}, "messages": sum(r for _, r, _, _ in reads),
            "bad_messages": len(bad), "bad_examples": bad[:MAX_ERRORS_SHOWN],
            "sealed_because": last.delta.reason or "", "seconds": round(time.monotonic() - started, 3),
        }
        if last.delta.watermark_us is not None:
            meta["watermark"] = dg.TimestampMetadataValue(last.delta.watermark_us / 1e6)
        return dg.MaterializeResult(
            metadata=meta,
            check_results=checks.increment_checks([(d, read, decoded, stats[d.delta_num])
                                                   for d, read, decoded, _ in reads]))

    @dg.asset(key=snapshot_key, deps=[increment_key, changelog_key], kinds={"spark", "iceberg"},
              check_specs=checks.snapshot_check_specs(snapshot_key),
              description=f"State of every table of {src} as of each delta ({layout.snapshot(src, '<table>')}): "
                          f"changes applied by {stream.format}'s own order, duplicates and late changes dropped, "
                          "deletes kept as tombstones; tagged delta_<N>.", **common)
    def snapshot(context: dg.AssetExecutionContext, spark: SparkResource):
        session = spark.get_session()
        n = run_deltas(context)[-1]  # a range run: every delta up to its last, folded per table
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
