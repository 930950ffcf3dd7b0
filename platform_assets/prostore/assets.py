"""The assets of one Prostore datamart, all partitioned by delta.

Lineage: kafka/<signal topic> -> signal_events[N]; kafka/<backup topic> -> changelog[N] ->
increment[N] -> snapshot[N] (increment also reads the backup topic), and increment[N] ->
history[N] (the versions delta N closed; written by the snapshot's step: history_asset.py) when
the datamart keeps history. A backup-only datamart (no signal topic) has no signal_events. Topic slices come in
through the Kafka IO managers (the delta's offsets, from the delta index); the assets write
their Iceberg tables themselves (resources/lake/prostore.py) and report what they wrote as
metadata.

The assets are one multi-asset: a run lands them in one step (delta_step.py), their
independent commits side by side, so a delta pays the engine's waits once and the snapshot
does not read back what the step has just written. Each is still an asset of its own, with
its lineage, checks and history; any subset can be materialized (`can_subset`).

A run covers one delta or a range of consecutive deltas (sensor, `sync`, UI backfill): the
IO managers hand the step one slice per delta; signal_events, changelog, increment and the
manifest take the whole range in one commit per table; snapshot folds the range into one
MERGE per table (each key's last change; split where a table's columns change), tagged with
its last delta; reading as of any N inside is exact (the commit's parent plus the increments).

Guarantees: re-materializing partition N (or a range) rewrites exactly its rows of
signal_events, changelog and increment; snapshot[N] applies every missing delta up to N in
order, never one twice, or fails naming the deltas whose increments have not landed.
"""


import dagster as dg

from platform_assets.config import DatamartConfig
from platform_assets.deltas.topics import topic_key
from platform_assets.delta_metadata import table_metadata, table_tags
from platform_assets.history_asset import history_spec
from platform_assets.lake_tables import Tables, remember_tables
from platform_assets.prostore import checks
from platform_assets.maintenance_step import maintain_after_landing, maintenance_due
from platform_assets.prostore.delta_step import DatamartKeys, land_delta_step
from resources.lake.maintenance_settings import MaintenanceSettings
from platform_assets.deltas.partitions import delta_partitions, run_deltas
from platform_assets.prostore.signal_rows import COLUMNS as SIGNAL_COLUMNS
from platform_assets.retirement import record_landed, retire_after_landing
from platform_assets.io_managers.inputs import INPUT_TAG_PREFIX
from platform_assets.io_managers.prostore import BackupSlice, SignalSlice
from resources.lake.layout import LakeLayout
from resources.lake.prostore_history import history_ident
from resources.prostore.resource import DeltaIndexResource
from resources.state.delta_marks import DeltaMarks
from resources.spark.resource import SparkResource

SIGNAL_IO, BACKUP_IO = "signal_topic_io", "backup_topic_io"


def build_datamart_assets(*, datamart: DatamartConfig, layout: LakeLayout, max_deltas_per_run: int = 1,
                          maintenance: MaintenanceSettings | None = None, partition_window: int = 0,
                          key_check_every: int = 1, known_tables: Tables | None = None) -> list:
    """The datamart's multi-asset; `known_tables`: its table list as the code location loaded it
    (platform_assets/lake_tables.py), which the step stores anew when a delta changes it."""
    dm = datamart.name
    keys = DatamartKeys.of(dm)
    boot = datamart.bootstrap
    backup_topic = topic_key(datamart.backup_topic)
    # With a bootstrap, the IO manager serves the deltas the snapshot covers from its topic.
    # The Kafka IO managers read these from the op's tags (platform_assets/io_managers/).
    about_inputs = {"datamart": dm, **({"bootstrap_topic": boot.topic, "bootstrap_last_delta": boot.last_delta}
                                       if boot else {})}
    ins = {"backup": dg.AssetIn(key=backup_topic, input_manager_key=BACKUP_IO)}
    boot_deps = [topic_key(boot.topic)] if boot else []  # lineage: the snapshot topic feeds them too
    read_kinds, lake_kinds = {"kafka", "spark", "iceberg"}, {"spark", "iceberg"}
    specs = [
        dg.AssetSpec(keys.changelog, deps=[backup_topic, *boot_deps], kinds=read_kinds,
                     tags=table_tags(layout.meta(dm, "changelog")),
                     metadata=table_metadata(layout.meta(dm, "changelog"), uri=layout.location),
                     description=f"The schema changelog shipped with each increment of {dm}, parsed into entity "
                                 f"schemas, in {layout.meta(dm, 'changelog')}."),
        dg.AssetSpec(keys.increment, deps=[keys.changelog, backup_topic, *boot_deps], kinds=read_kinds,
                     description=f"Raw changes of each delta of {dm}, one Iceberg table per logical table "
                                 f"(`{layout.increment(dm, '<table>')}`), with sys_op, delta_num and delta_date."),
        dg.AssetSpec(keys.snapshot, deps=[keys.increment, keys.changelog], kinds=lake_kinds,
                     description=f"State of every table of {dm} as of each delta (`{layout.snapshot(dm, '<table>')}`): "
                                 "upsert on sys_op 0, delete on 1, by the DDL's primary key; tagged `delta_<N>`."),
    ]
    if datamart.history:
        specs.append(history_spec(dm, key=keys.history, deps=[keys.increment, keys.changelog],
                                  tables=f"`{history_ident(layout, dm, '<table>')}`"))
    if not datamart.backup_only:
        signal_topic = topic_key(datamart.signal_topic)
        ins["signal"] = dg.AssetIn(key=signal_topic, input_manager_key=SIGNAL_IO)
        specs.insert(0, dg.AssetSpec(
            keys.signal_events, deps=[signal_topic], kinds=read_kinds,
            tags=table_tags(layout.meta(dm, "signal_events")),
            metadata=table_metadata(layout.meta(dm, "signal_events"), SIGNAL_COLUMNS, uri=layout.location),
            description=f"Signal events of each delta of {dm} (DELTA_OPEN .. DELTA_CLOSE, WRITE_*, DDL), "
                        f"de-duplicated by eventLogId, in {layout.meta(dm, 'signal_events')}."))
    decorate = dg.multi_asset(
        name=f"{dm}_deltas", specs=specs, ins=ins, can_subset=True, group_name=dm, partitions_def=delta_partitions(dm),
        check_specs=[*checks.increment_check_specs(keys.increment), *checks.snapshot_check_specs(keys.snapshot)],
        op_tags={INPUT_TAG_PREFIX + k: str(v) for k, v in about_inputs.items()},
        pool=f"deltaport_{dm}", backfill_policy=dg.BackfillPolicy.multi_run(max_deltas_per_run),
        description=f"Lands a delta (or a range of deltas) of {dm}: every selected asset, in one step.")

    def step(context, backup, signal, spark: SparkResource, index: DeltaIndexResource):
        session = spark.get_session()
        marks = DeltaMarks(index.store())
        landing = land_delta_step(context, datamart=dm, layout=layout, keys=keys, backup=backup, signal=signal,
                                  session=session, index=index.get(), keep_history=datamart.history,
                                  key_check_every=key_check_every,
                                  maintaining=maintenance_due(context, source=dm, settings=maintenance),
                                  tables_seen=lambda tables, target: remember_tables(
                                      context, dm, tables, known_tables or {}, delta=target))
        yield from record_landed(landing, marks=marks, source=dm, snapshot=keys.snapshot, deltas=run_deltas(context))
        yield from maintain_after_landing(context, session, catalog=layout.catalog, source=dm, settings=maintenance)
        yield from retire_after_landing(context, source=dm, marks=marks, window=partition_window,
                                        every=(maintenance or MaintenanceSettings()).every_deltas)

    if datamart.backup_only:  # no signal topic: no signal input
        @decorate
        def backup_only_deltas(context: dg.AssetExecutionContext, backup: list[BackupSlice], spark: SparkResource,
                               index: DeltaIndexResource):
            yield from step(context, backup, None, spark, index)
        return [backup_only_deltas]

    @decorate
    def deltas(context: dg.AssetExecutionContext, backup: list[BackupSlice], signal: list[SignalSlice],
               spark: SparkResource, index: DeltaIndexResource):
        yield from step(context, backup, signal, spark, index)
    return [deltas]
