"""Table maintenance inside a source's delta run (resources/lake/maintenance.py says what it does).

A run whose deltas cross a multiple of `lake.maintenance.every_deltas` maintains every table of
its source after the snapshot has landed, as Hudi compacts and cleans inline:
- The run already holds its source (one run at a time: the run tag limit and the source's pool),
  so nothing writes those tables meanwhile. A separate job would have to queue behind the delta
  runs, or race them.
- The daemon's runs, `sync`'s runs and backfills all get it, with nothing to schedule.
- Most runs pay nothing; a backlog's range run pays it once.

What it did is an AssetObservation on `<source>/snapshot`: files and delete files before and
after, bytes, seconds. The UI plots these, and `sync` logs them. A run that failed earlier never
maintains.
"""

from __future__ import annotations

from typing import Iterator

import dagster as dg

from platform_assets.deltas.partitions import run_deltas
from resources.lake.maintenance import due, maintain_source
from resources.lake.maintenance_settings import MaintenanceSettings


def maintenance_due(context: dg.AssetExecutionContext, *, source: str, settings: MaintenanceSettings | None) -> bool:
    """Whether this run maintains its source's tables (the snapshot landed in it, and its deltas
    cross a multiple of `every_deltas`); the snapshot's key check then looks at every key."""
    return (settings is not None and dg.AssetKey([source, "snapshot"]) in context.selected_asset_keys
            and due(run_deltas(context), settings.every_deltas))


def maintain_after_landing(context: dg.AssetExecutionContext, session, *, catalog: str, source: str,
                           settings: MaintenanceSettings | None) -> Iterator[dg.AssetObservation]:
    snapshot = dg.AssetKey([source, "snapshot"])
    if not maintenance_due(context, source=source, settings=settings):
        return
    done = maintain_source(session, catalog, source, settings)
    for table in done:
        context.log.info(f"maintenance: {table.text()}")

    def total(attr: str, i: int) -> int:
        return sum(getattr(t, attr)[i] for t in done)

    yield dg.AssetObservation(asset_key=snapshot, description="table maintenance", metadata={
        "maintenance/tables": len(done),
        "maintenance/compacted": sum("compacted" in t.done for t in done),
        "maintenance/data_files_before": total("data_files", 0), "maintenance/data_files_after": total("data_files", 1),
        "maintenance/delete_files_before": total("delete_files", 0),
        "maintenance/delete_files_after": total("delete_files", 1),
        "maintenance/bytes_before": total("bytes", 0), "maintenance/bytes_after": total("bytes", 1),
        "maintenance/seconds": round(sum(t.seconds for t in done), 3)})
