"""The Spark engine settings of a deployment, from its deltaport.yaml (no Dagster import: the
quick CLI commands reach the engine through this, the Dagster resource is built from it); and
the same lake opened without Spark, through PyIceberg (`pyiceberg_tables`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from platform_assets.config import PlatformConfig, resolve_secret

if TYPE_CHECKING:
    from resources.spark.engine import EngineSettings


def _warehouse(cfg: PlatformConfig) -> str:
    warehouse = cfg.lake.warehouse
    if cfg.lake.type in ("hadoop", "jdbc") and "://" not in warehouse:
        warehouse = str(cfg.resolve_path(warehouse))
    return warehouse


def tables_root(cfg: PlatformConfig) -> str | None:
    """The folder under which the catalog places a table by its name (`LakeLayout.tables_root`):
    a hadoop or JDBC catalog's warehouse; None for one that chooses (REST, Hive)."""
    return _warehouse(cfg) if cfg.lake.type in ("hadoop", "jdbc") else None


def engine_for(cfg: PlatformConfig) -> EngineSettings:
    # The Spark side (server, session, jars) is imported here, not with the module: the JVM-free
    # `deltaport sql`/`read` import this module for `pyiceberg_tables` and never reach Spark.
    from resources.spark.engine import EngineSettings
    from resources.spark.session import CatalogConfig

    warehouse = _warehouse(cfg)
    props = cfg.lake.properties
    catalog = CatalogConfig(name=cfg.lake.catalog, type=cfg.lake.type, warehouse=warehouse, uri=cfg.lake.uri,
                            properties={k: str(v) for k, v in props.items() if not isinstance(v, dict)},
                            secret_properties={k: v["env"] for k, v in props.items() if isinstance(v, dict)})
    return EngineSettings(remote=cfg.spark.remote, master=cfg.spark.master,
                          state_dir=str(cfg.resolve_path(cfg.state_dir)), catalog=catalog,
                          conf={k: str(v) for k, v in cfg.spark.conf.items()},
                          idle_timeout_minutes=cfg.spark.idle_timeout_minutes)


def pyiceberg_tables(cfg: PlatformConfig) -> Callable[[str], object]:
    """A function opening the deployment's lake tables ("ns.table") with PyIceberg, no JVM
    (`resources.lake.pyiceberg_read.load_table`); secrets ({env: NAME}) are read now. A catalog
    (SQLAlchemy engine, REST session) is made once and reused by every call."""
    from resources.lake import pyiceberg_read

    lake = cfg.lake
    props = {k: str(resolve_secret(v)) for k, v in lake.properties.items()}
    if lake.type == "hadoop":
        return lambda ident: pyiceberg_read.load_table(ident, type="hadoop", warehouse=_warehouse(cfg),
                                                       properties=props)
    catalog = pyiceberg_read.open_catalog(type=lake.type, catalog=lake.catalog, warehouse=_warehouse(cfg),
                                          uri=lake.uri, properties=props)
    return lambda ident: pyiceberg_read.load_from(catalog, ident)
