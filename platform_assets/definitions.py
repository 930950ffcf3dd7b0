"""The Dagster code location of deltaport: what `dagster dev -w workspace.yaml` loads.

Built from the config file (`deltaport.yaml`, or $DELTAPORT_CONFIG), read when the code
location loads, not when this module is imported: per Prostore datamart, one asset group
(signal_events, changelog, increment, snapshot, partitioned by delta; no signal_events for a
backup-only datamart), one job and one delta sensor; the user assets of the config's `code:`
modules in their source's group (platform_assets/build_on.py); per Qlik / DataWorks / Datastream source, one asset group (changelog,
increment, snapshot), one job and one sealing sensor; the Kafka topics as source assets loaded
by the Kafka IO managers; Spark, Kafka, the delta index and the CDC ledger as resources.

The delta jobs run their steps in the run's own process (in_process_executor): the steps are a
chain that waits on the Spark server, so a process per step (Dagster's default, ~4 s each on 2
cores) bought no parallelism, only start-up time; one process keeps one Connect session.
"""

from __future__ import annotations

import warnings

import dagster as dg

from platform_assets.build_on import build_delta_asset, load_user_code
from platform_assets.config import ConfigError, PlatformConfig, load_config, maintenance_settings
from platform_assets.engine import engine_for, tables_root
from platform_assets.io_managers.prostore import BackupTopicIOManager, SignalTopicIOManager
from platform_assets.io_managers.streams import StreamTopicIOManager
from platform_assets.lag_check import build_lag_check
from platform_assets.lake_tables import load_tables, table_specs
from platform_assets.deltas.topics import topic_key
from platform_assets.prostore.assets import BACKUP_IO, SIGNAL_IO, build_datamart_assets
from platform_assets.deltas.requests import source_tags
from platform_assets.prostore.sensors import build_delta_sensor
from platform_assets.streams.assets import STREAM_IO, build_stream_assets
from platform_assets.streams.sensors import build_seal_sensor
from resources.changestream.resource import CdcLedgerResource
from resources.prostore.resource import DeltaIndexResource
from resources.kafka.resource import KafkaResource
from resources.lake.layout import LakeLayout
from resources.lake.versions_view import catalog_keeps_views
from resources.spark.resource import SparkResource


def _topic_specs(cfg: PlatformConfig) -> list[dg.AssetSpec]:
    uses = [(dm.backup_topic, BACKUP_IO, "BACKUP_TO_KAFKA increments") for dm in cfg.datamarts]
    uses += [(dm.signal_topic, SIGNAL_IO, "Prostore signal events") for dm in cfg.datamarts if not dm.backup_only]
    uses += [(dm.bootstrap.topic, BACKUP_IO, "a BACKUP_TO_KAFKA snapshot") for dm in cfg.datamarts if dm.bootstrap]
    uses += [(s.topic, STREAM_IO, f"{s.format} change events") for s in cfg.streams]
    # The IO manager that reads a topic is named by the assets' inputs (`AssetIn(input_manager_key=...)`),
    # not here: the topic's page then shows no internal `dagster/io_manager_key`. It is still
    # kept per topic so that one topic is never read as two kinds.
    roles: dict[str, tuple[str, str]] = {}  # topic -> (IO manager key, what it carries)
    for topic, io_key, what in uses:
        if roles.setdefault(topic, (io_key, what)) != (io_key, what):
            raise ConfigError("sources", f"topic {topic!r} is used for both {roles[topic][1]} and {what}")
    return [
        dg.AssetSpec(topic_key(topic), group_name="kafka", kinds={"kafka"}, description=f"Kafka topic {topic} ({what})",
                     metadata={"topic": topic})
        for topic, (_, what) in sorted(roles.items())
    ]


def kafka_resource(cfg: PlatformConfig) -> KafkaResource:
    """The config's Kafka settings (secrets as environment variable names, read when a client is built)."""
    return KafkaResource(bootstrap_servers=cfg.kafka.bootstrap_servers,
                         properties={k: str(v) for k, v in cfg.kafka.properties.items() if not isinstance(v, dict)},
                         secret_properties={k: v["env"] for k, v in cfg.kafka.properties.items() if isinstance(v, dict)},
                         timeout_seconds=cfg.kafka.timeout_seconds, state_dir=str(cfg.resolve_path(cfg.state_dir)))


def index_resource(cfg: PlatformConfig) -> DeltaIndexResource:
    return DeltaIndexResource(url=cfg.state_url("index"), password_env=cfg.state_password_env)


def ledger_resource(cfg: PlatformConfig) -> CdcLedgerResource:
    return CdcLedgerResource(url=cfg.state_url("ledger"), password_env=cfg.state_password_env)


def resources_for(cfg: PlatformConfig) -> dict:
    kafka = kafka_resource(cfg)
    index = index_resource(cfg)
    ledger = ledger_resource(cfg)
    engine = engine_for(cfg)
    spark = SparkResource(remote=engine.remote, master=engine.master, state_dir=engine.state_dir,
                          catalog_name=engine.catalog.name, catalog_type=engine.catalog.type,
                          warehouse=engine.catalog.warehouse, catalog_uri=engine.catalog.uri,
                          catalog_properties=dict(engine.catalog.properties),
                          catalog_secret_properties=dict(engine.catalog.secret_properties),
                          spark_conf=dict(engine.conf), idle_timeout_minutes=engine.idle_timeout_minutes)
    return {"kafka": kafka, "index": index, "ledger": ledger, "spark": spark,
            BACKUP_IO: BackupTopicIOManager(kafka=kafka, index=index), SIGNAL_IO: SignalTopicIOManager(index=index),
            STREAM_IO: StreamTopicIOManager(kafka=kafka, ledger=ledger)}


def build_definitions(cfg: PlatformConfig) -> dg.Definitions:
    with warnings.catch_warnings():
        # `backfill_policy` is marked beta; range runs are what it is for, and the warning would
        # repeat on every code-location load and `sync`.
        warnings.simplefilter("ignore", dg.BetaWarning)
        return _build_definitions(cfg)


def _delta_selection(source: str, lag_check: dg.AssetChecksDefinition) -> dg.AssetSelection:
    """The source's group, less its lag check: the sensor evaluates that one on every tick, and a
    lagging source has no run to evaluate it in."""
    return dg.AssetSelection.groups(source) - dg.AssetSelection.checks(lag_check)


def _build_definitions(cfg: PlatformConfig) -> dg.Definitions:
    layout = LakeLayout(cfg.lake.catalog, history_span=cfg.lake.history_partition_deltas,
                        versions_views=catalog_keeps_views(cfg.lake.type), tables_root=tables_root(cfg))
    assets: list = list(_topic_specs(cfg))
    jobs, sensors, checks = [], [], []
    maintenance = maintenance_settings(cfg)
    for dm in cfg.datamarts:
        tables = load_tables(dm.name)  # each table an asset of its own in the catalog (lake_tables.py)
        assets += build_datamart_assets(datamart=dm, layout=layout, max_deltas_per_run=cfg.sensor.max_deltas_per_run,
                                        maintenance=maintenance, partition_window=cfg.sensor.partition_window,
                                        key_check_every=cfg.lake.key_check_every_deltas, known_tables=tables)
        assets += table_specs(dm.name, tables, upstream=dg.AssetKey([dm.name, "snapshot"]),
                              ident=lambda t, dm=dm.name: layout.snapshot(dm, t), uri=layout.location)
        checks.append(build_lag_check(source=dm, kind="prostore", max_lag_seconds=cfg.sensor.max_lag_seconds))
        job = dg.define_asset_job(f"{dm.name}_delta_job", selection=_delta_selection(dm.name, checks[-1]),
                                  tags=source_tags(dm.name),
                                  executor_def=dg.in_process_executor,
                                  description=f"Lands a delta (or a range of deltas) of {dm.name}: "
                                              f"{'' if dm.backup_only else 'signal events, '}changelog, increment, snapshot.")
        jobs.append(job)
        sensors.append(build_delta_sensor(datamart=dm, job=job, settings=cfg.sensor))
    for stream in cfg.streams:
        tables = load_tables(stream.name)
        assets += build_stream_assets(stream=stream, layout=layout, max_deltas_per_run=cfg.sensor.max_deltas_per_run,
                                      maintenance=maintenance, partition_window=cfg.sensor.partition_window,
                                      key_check_every=cfg.lake.key_check_every_deltas, known_tables=tables)
        assets += table_specs(stream.name, tables, upstream=dg.AssetKey([stream.name, "snapshot"]),
                              ident=lambda t, src=stream.name: layout.snapshot(src, t), uri=layout.location)
        checks.append(build_lag_check(source=stream, kind="stream", max_lag_seconds=cfg.sensor.max_lag_seconds))
        job = dg.define_asset_job(f"{stream.name}_delta_job", selection=_delta_selection(stream.name, checks[-1]),
                                  tags=source_tags(stream.name),
                                  executor_def=dg.in_process_executor,
                                  description=f"Lands a sealed delta (or a range) of {stream.name} ({stream.format}): "
                                              "changelog, increment, snapshot.")
        jobs.append(job)
        sensors.append(build_seal_sensor(stream=stream, job=job, settings=cfg.sensor))
    # User assets (`code:`) join their source's group, so its delta job lands them too.
    user_assets, user_defs = load_user_code(cfg)
    assets += [build_delta_asset(a, cfg=cfg) for a in user_assets]
    ours = dg.Definitions(assets=assets, asset_checks=checks, jobs=jobs, sensors=sensors, resources=resources_for(cfg))
    return dg.Definitions.merge(ours, *user_defs) if user_defs else ours


def deltaport_definitions(config_path: str | None = None) -> dg.Definitions:
    """deltaport's Definitions for a user's own code location: `dg.Definitions.merge(
    deltaport_definitions("deltaport.yaml"), my_defs)` (the config's `code:` modules included)."""
    return build_definitions(load_config(config_path))


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(load_config())
