"""The `<source>/history` asset of a datamart or change stream: its closed row versions.

What flows through: nothing of its own. The history tables (`lake.<source>_history.<table>`,
partitioned by the delta that closed each version) are written inside the snapshot's step,
each delta's closed versions first, then the snapshot's MERGE, because the versions a delta
closes are read from the snapshot's state before it (resources/lake/prostore_history.py). This
module declares the asset, so that the lineage shows where history comes from
(increment -> history, beside snapshot) and the UI shows which deltas it holds, and reports it
whenever the snapshot step wrote it.

Guarantees: history[N] is materialized exactly when the snapshot's step applied N with history
on, whether or not the run selected history (a snapshot backfill on its own still writes it,
so it still reports it). Selecting history without the snapshot is refused before anything is
written: alone it could only be a second, different writer of the same tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import dagster as dg

from resources.errors import DeltaportError


class HistoryWithoutSnapshotError(DeltaportError):
    """A run selected `<source>/history` but not `<source>/snapshot`, which writes it."""


def history_spec(source: str, *, key: dg.AssetKey, deps: list[dg.AssetKey], tables: str) -> dg.AssetSpec:
    return dg.AssetSpec(
        key, deps=deps, kinds={"spark", "iceberg"},
        description=f"Every closed row version of {source}'s tables ({tables}), with sys_from, sys_to, sys_op "
                    "and both ends' close times, partitioned by the delta that closed it: the FOR SYSTEM_TIME "
                    "forms read it (`deltaport read --as-of-delta/--as-of/--started-in/--finished-in`). Written "
                    "by the snapshot's step, before each MERGE; materialized with the snapshot.")


def refuse_history_alone(chosen: Iterable[dg.AssetKey], *, history: dg.AssetKey | None,
                         snapshot: dg.AssetKey) -> None:
    """Raise before any work when the run selected history without the snapshot."""
    chosen = set(chosen)
    if history is not None and history in chosen and snapshot not in chosen:
        raise HistoryWithoutSnapshotError(
            f"{history.to_user_string()} is written by {snapshot.to_user_string()}'s step, before each MERGE "
            f"(the versions a delta closes are read from the snapshot as it was): select "
            f"{snapshot.to_user_string()} (history comes with it)")


def history_reported(context: dg.AssetExecutionContext, *, key: dg.AssetKey | None, tables: list[str],
                     applied_deltas: list[int], deltas: str) -> Iterator:
    """The history's materialization for the run's partitions: a result when the run selected
    it, else one materialization event per partition (the tables were written all the same).
    `key` None: the source keeps no history."""
    if key is None:
        return
    metadata = {"tables": sorted(tables), "applied_deltas": applied_deltas, "deltas": deltas}
    if key in context.selected_asset_keys:
        yield dg.MaterializeResult(asset_key=key, metadata=metadata)
        return
    for partition in context.partition_keys:
        yield dg.AssetMaterialization(asset_key=key, partition=partition, metadata=metadata)
