"""The record the UI's backfill dialog adds: a `PartitionBackfill` of `keys` of the assets
`selection`, in `status`, added to the instance (tests of retirement and of the partition window
make the UI's backfills this way; the runs are then launched as the backfill daemon would)."""

from __future__ import annotations

import time

from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill


def add_ui_backfill(instance, asset_graph, backfill_id: str, keys: list[str], selection: list,
                    status: BulkActionStatus) -> PartitionBackfill:
    record = PartitionBackfill.from_asset_partitions(
        backfill_id=backfill_id, asset_graph=asset_graph, partition_names=keys, asset_selection=selection,
        backfill_timestamp=time.time(), tags={}, dynamic_partitions_store=instance, all_partitions=False,
        title=None, description=None, run_config=None)
    instance.add_backfill(record.with_status(status))
    return record
