"""The Spark engine settings of a deployment, from its deltaport.yaml (no Dagster import: the
quick CLI commands reach the engine through this, the Dagster resource is built from it)."""

from __future__ import annotations

from platform_assets.config import PlatformConfig
from resources.spark.engine import EngineSettings
from resources.spark.session import CatalogConfig


def engine_for(cfg: PlatformConfig) -> EngineSettings:
    warehouse = cfg.lake.warehouse
    if cfg.lake.type in ("hadoop", "jdbc") and "://" not in warehouse:
        warehouse = str(cfg.resolve_path(warehouse))
    props = cfg.lake.properties
    catalog = CatalogConfig(name=cfg.lake.catalog, type=cfg.lake.type, warehouse=warehouse, uri=cfg.lake.uri,
                            properties={k: str(v) for k, v in props.items() if not isinstance(v, dict)},
                            secret_properties={k: v["env"] for k, v in props.items() if isinstance(v, dict)})
    return EngineSettings(remote=cfg.spark.remote, master=cfg.spark.master,
                          state_dir=str(cfg.resolve_path(cfg.state_dir)), catalog=catalog,
                          conf={k: str(v) for k, v in cfg.spark.conf.items()},
                          idle_timeout_minutes=cfg.spark.idle_timeout_minutes)
