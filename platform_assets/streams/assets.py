"""The assets of one change-stream source (Qlik Replicate, DataWorks, Datastream), partitioned by delta.

Lineage: kafka/<topic> -> changelog[N] -> increment[N] -> snapshot[N] (increment also reads the
topic), and increment[N] -> history[N] when the source keeps history (platform_assets/history_asset.py),
the same shape as a Prostore datamart's group (which adds signal_events). Delta N is
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

The three assets are one multi-asset: a run lands them in one step (delta_step.py), the
delta's messages read once, changelog and increment side by side; each is still an asset of
its own, with its lineage, checks and history, and any subset can be materialized.

A run covers one delta or a range: changelog, increment and manifest take the range in one
commit per table; the snapshot folds the range into one MERGE per table (the same state as
applying its deltas in turn, resources/lake/cdc_fold.py), tagged with its last delta; reading
as of any N inside is exact (the state before the fold plus the deltas up to N).

Guarantees: re-materializing N rewrites exactly N's changelog and increment rows (the ledger
makes N the same offsets forever); a snapshot already at N or later is left as is.
"""


import dagster as dg

from platform_assets.config import StreamConfig
from platform_assets.delta_metadata import table_metadata, table_tags
from platform_assets.history_asset import history_spec
from platform_assets.deltas.topics import topic_key
from platform_assets.deltas.partitions import delta_partitions, run_deltas
from platform_assets.retirement import record_landed, retire_after_landing
from platform_assets.lake_tables import Tables, merged, remember_tables
from platform_assets.streams import checks
from platform_assets.maintenance_step import maintain_after_landing, maintenance_due
from platform_assets.streams.delta_step import StreamKeys, land_stream_step
from resources.lake.maintenance_settings import MaintenanceSettings
from platform_assets.io_managers.inputs import INPUT_TAG_PREFIX
from platform_assets.io_managers.streams import StreamSlice
from resources.lake.layout import LakeLayout
from resources.lake.prostore_history import history_ident
from resources.spark.resource import SparkResource
from resources.state.delta_marks import DeltaMarks
from resources.state.resource import StateStoreResource

STREAM_IO = "stream_topic_io"


def build_stream_assets(*, stream: StreamConfig, layout: LakeLayout, max_deltas_per_run: int = 1,
                        maintenance: MaintenanceSettings | None = None, partition_window: int = 0,
                        key_check_every: int = 1, known_tables: Tables | None = None) -> list:
    """The source's multi-asset; `known_tables`: its table list as the code location loaded it
    (platform_assets/lake_tables.py), which the step stores anew when a delta changes it."""
    src = stream.name
    known = dict(known_tables or {})
    keys = StreamKeys.of(src)
    topic = topic_key(stream.topic)
    read_kinds = {"kafka", "spark", "iceberg"}
    specs = [
        dg.AssetSpec(keys.changelog, deps=[topic], kinds=read_kinds, tags=table_tags(layout.meta(src, "changelog")),
                     metadata=table_metadata(layout.meta(src, "changelog"), uri=layout.location),
                     description=f"Table structures, DDL events and key columns of each delta of {src} "
                                 f"({stream.format}), in {layout.meta(src, 'changelog')}."),
        dg.AssetSpec(keys.increment, deps=[keys.changelog, topic], kinds=read_kinds,
                     description=f"Raw changes of each delta of {src} ({stream.format}), one Iceberg table per "
                                 f"source table (`{layout.increment(src, '<namespace>_<table>')}`), with the "
                                 "format's order key."),
        dg.AssetSpec(keys.snapshot, deps=[keys.increment, keys.changelog], kinds={"spark", "iceberg"},
                     description=f"State of every table of {src} as of each delta (`{layout.snapshot(src, '<table>')}`): "
                                 f"changes applied by {stream.format}'s own order, duplicates and late changes "
                                 "dropped, deletes kept as tombstones; tagged `delta_<N>`."),
    ]
    if stream.history:
        specs.append(history_spec(src, key=keys.history, deps=[keys.increment, keys.changelog],
                                  tables=f"`{history_ident(layout, src, '<table>')}`"))

    # The stream IO manager reads `source` and `format` from the op's tags.
    @dg.multi_asset(
        name=f"{src}_deltas", specs=specs, ins={"topic": dg.AssetIn(key=topic, input_manager_key=STREAM_IO)}, can_subset=True, group_name=src,
        partitions_def=delta_partitions(src),
        check_specs=[*checks.increment_check_specs(keys.increment), *checks.snapshot_check_specs(keys.snapshot)],
        op_tags={f"{INPUT_TAG_PREFIX}source": src, f"{INPUT_TAG_PREFIX}format": stream.format},
        pool=f"deltaport_{src}", backfill_policy=dg.BackfillPolicy.multi_run(max_deltas_per_run),
        description=f"Lands a sealed delta (or a range) of {src}: every selected asset, in one step.")
    def deltas(context: dg.AssetExecutionContext, topic: list[StreamSlice], spark: SparkResource,
               index: StateStoreResource):
        session = spark.get_session()
        # `index` is the state store the delta index lives in (typed by the source-neutral base: a stream
        # reads no Prostore index, only the landed and retired marks kept beside it: resources/state/delta_marks.py)
        marks = DeltaMarks(index.store())
        landing = land_stream_step(context, source=src, layout=layout, keys=keys, topic=topic, session=session,
                                   keep_history=stream.history, key_check_every=key_check_every,
                                   maintaining=maintenance_due(context, source=src, settings=maintenance),
                                   mark=marks.get(src).landed_through,
                                   # A stream's tables only add up (no DROP), and a run counts only those it
                                   # read: the ones listed before (loaded, or stored since) stay listed.
                                   tables_seen=lambda names, seen, target: remember_tables(
                                       context, src, lambda base: merged(base, seen, set(base) | names), known,
                                       delta=target))
        yield from record_landed(landing, marks=marks, source=src, snapshot=keys.snapshot, deltas=run_deltas(context))
        yield from maintain_after_landing(context, session, catalog=layout.catalog, source=src, settings=maintenance)
        yield from retire_after_landing(context, source=src, marks=marks, window=partition_window,
                                        every=(maintenance or MaintenanceSettings()).every_deltas)

    return [deltas]


__all__ = ["STREAM_IO", "build_stream_assets"]
