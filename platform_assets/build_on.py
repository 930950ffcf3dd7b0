"""Build on deltaport: your own assets downstream of a source's snapshots, one partition per delta.

What flows through: a function decorated with `@delta_asset(source=..., name=...)` gets a
`DeltaView`, which gives the source's tables as of one delta as Spark DataFrames. It returns a
Spark DataFrame: the asset's rows for that delta. deltaport writes those rows into the Iceberg
table `lake.<source>_marts.<name>`, with a `delta_num` column. A re-run of a delta replaces that
delta's rows and no others, so re-running any partition gives the same table.

The asset is partitioned by the source's deltas and placed in the source's asset group, below
`<source>/snapshot` in the lineage. So it is part of the source's delta job, and every run that
lands deltas (the sensor's, `deltaport sync`'s, a backfill from the UI) lands the asset for the
same deltas, right after the snapshot, in the same run. A range run covers the asset as a range
too: one Iceberg commit for all its deltas.

Why the source's job and not Dagster's declarative automation:
- `deltaport sync` runs headless, with no daemon to evaluate automation conditions.
- A second run per delta would queue behind the source's one-run-at-a-time limit.
- A range run would become a backlog of one-delta runs of the asset.

A failing user asset fails the run after the snapshot has landed. The deltas stay landed, and
the asset can be re-run for those partitions from the UI.

Where the code lives: `code:` in `deltaport.yaml` lists Python modules. They are imported from
the config file's folder first, then from the environment. deltaport collects every
`@delta_asset` at module level, and a module-level `defs = dg.Definitions(...)` is merged into
the code location as it is. A user who keeps their own code location calls
`deltaport_definitions()` and merges it instead.
"""


import importlib
import sys
from dataclasses import dataclass
from typing import Callable

import dagster as dg

from platform_assets.config import ConfigError, PlatformConfig
from platform_assets.deltas.partitions import delta_partitions, run_deltas
from platform_assets.delta_metadata import per_delta_metadata, table_metadata, table_tags
from platform_assets.engine import tables_root
from resources.lake.layout import LakeLayout
from resources.spark.resource import SparkResource

SNAPSHOT = "snapshot"


@dataclass(frozen=True)
class DeltaAsset:
    """A user asset of one source, built into deltaport's code location (`build_delta_asset`)."""

    source: str
    name: str
    fn: Callable
    description: str | None = None

    def key(self) -> dg.AssetKey:
        return dg.AssetKey([self.source, self.name])


def delta_asset(*, source: str, name: str | None = None, description: str | None = None):
    """Decorator: `fn(view: DeltaView) -> pyspark DataFrame`, the asset's rows as of `view.delta`."""
    def wrap(fn: Callable) -> DeltaAsset:
        return DeltaAsset(source=source, name=name or fn.__name__, fn=fn,
                          description=description or (fn.__doc__ or "").strip() or None)
    return wrap


def mart_table(catalog: str, asset: DeltaAsset) -> str:
    return f"{catalog}.{asset.source}_marts.{asset.name}"


def load_user_code(cfg: PlatformConfig) -> tuple[list[DeltaAsset], list[dg.Definitions]]:
    """Import the config's `code:` modules; their `@delta_asset`s and their `defs`."""
    folder = str(cfg.resolve_path("."))
    if cfg.code and folder not in sys.path:
        sys.path.insert(0, folder)  # modules beside deltaport.yaml, as a workspace's working_directory
    assets, defs = [], []
    for i, module_name in enumerate(cfg.code):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"code[{i}]", f"cannot import {module_name!r}: {exc}", cfg.source_file) from exc
        for value in vars(module).values():
            if isinstance(value, DeltaAsset):
                assets.append(value)
        if isinstance(getattr(module, "defs", None), dg.Definitions):
            defs.append(module.defs)
    names = cfg.source_names
    for asset in assets:
        if asset.source not in names:
            raise ConfigError("code", f"@delta_asset {asset.name!r} names source {asset.source!r}, which is not "
                                      f"in the config (sources: {', '.join(names)})", cfg.source_file)
    return assets, defs


def build_delta_asset(asset: DeltaAsset, *, cfg: PlatformConfig) -> dg.AssetsDefinition:
    """The Dagster asset of a `DeltaAsset`: partitioned, pooled and ranged as its source's assets."""
    from platform_assets.build_on_view import DeltaView, mart_rows_by_delta, write_mart

    source = asset.source
    ident = mart_table(cfg.lake.catalog, asset)
    uri = LakeLayout(cfg.lake.catalog, tables_root=tables_root(cfg)).location
    kind = "prostore" if source in {d.name for d in cfg.datamarts} else "stream"

    @dg.asset(key=asset.key(), deps=[dg.AssetKey([source, SNAPSHOT])], group_name=source,
              partitions_def=delta_partitions(source), pool=f"deltaport_{source}", kinds={"spark", "iceberg"},
              backfill_policy=dg.BackfillPolicy.multi_run(cfg.sensor.max_deltas_per_run),
              metadata=table_metadata(ident, uri=uri), tags=table_tags(ident),
              description=asset.description or f"{asset.name}, built on {source}'s snapshots, in {ident}.")
    def _user_asset(context: dg.AssetExecutionContext, spark: SparkResource) -> dg.MaterializeResult:
        session = spark.get_session()
        deltas = run_deltas(context)
        views = DeltaView.for_deltas(session, cfg.lake.catalog, source, kind, deltas)
        frames = []
        for view in views:
            frame = asset.fn(view)
            if frame is None or not hasattr(frame, "schema"):
                raise dg.Failure(description=f"@delta_asset {asset.name} returned {type(frame).__name__} for delta "
                                             f"{view.delta}, not a Spark DataFrame")
            frames.append((view.delta, frame))
        live: dict[str, int] = {}
        rows = write_mart(session, ident, frames, live=live)
        context.log.info(f"{ident}: {rows} rows for deltas {deltas[0]}-{deltas[-1]}")
        # Each partition says its own delta's rows; a range's total only under `range_rows`.
        by_delta = mart_rows_by_delta(session, ident, deltas) if len(deltas) > 1 else {deltas[0]: rows}
        mine = {n: {"rows": dg.IntMetadataValue(c), "dagster/partition_row_count": c} for n, c in by_delta.items()}
        if ident in live:  # the table's rows after the run, on its last delta (as of which they are counted)
            mine[deltas[-1]]["dagster/row_count"] = dg.IntMetadataValue(live[ident])
        per_delta_metadata(context, asset.key(), mine)
        # The columns as written (the asset's frame and delta_num): one schema request per run.
        columns = [(f.name, f.dataType.simpleString()) for f in frames[-1][1].schema.fields] + [("delta_num", "int")]
        whole = {"table": ident, **table_metadata(ident, columns, uri=uri),
                 "deltas": f"{deltas[0]}-{deltas[-1]}" if len(deltas) > 1 else str(deltas[0])}
        if len(deltas) > 1:
            whole["range_rows"] = dg.IntMetadataValue(rows)
        return dg.MaterializeResult(metadata=whole)

    return _user_asset
