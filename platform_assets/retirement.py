"""Retiring old deltas from Dagster: what the instance holds per source stays bounded by a window.

Why: every delta is a partition of `<source>_deltas`, and a deployment closes ~105,000 a year.
Dagster's partition views, its asset status cache (rebuilt whole whenever a dynamic partitions
definition gains or loses a key) and every "all materialized partitions" query grow with them
(issue 43: 11 s for the lineage view at 300,000). The lake does not need Dagster to remember:
every delta stays in the Iceberg tables (snapshot tags and history, increments by delta_num, the
manifest) and the state store (the delta index, the ledger).

What flows through: the source's marks in the state store (resources/state/delta_marks.py: the
last landed delta, the last retired one) and the instance's partitions and runs. A pass retires
the deltas up to `landed_through - window`:
1. deletes their dynamic partitions (listed from the instance: at most the window plus a batch
   once the first passes are done, and the partitions a re-run put back are swept too);
2. deletes the finished runs of the source whose deltas are all retired, with their events (the
   materializations, check evaluations' events and executions, logs): every run's events in one
   connection, then run by run its files (its compute logs, and on a SQLite instance its own
   event file: platform_assets/run_files.py) and its record (`_delete_runs`); the files of runs
   the instance no longer holds (retired before this, or deleted from the UI) are swept too. The source's runs are those its delta job tags (`deltaport/datamart`: the
   sensor's, `sync`'s, `rerun`'s, a UI launch of the job), the runs of the UI's asset
   backfills of its assets (no deltaport tag: found by the backfill's id, kept to runs whose
   asset selection holds one of the source's assets; their deltas come from Dagster's partition
   or range tags) and the UI's "Materialize" of one partition of its assets (found by the
   partition tags of the deltas the pass retires);
   `wipe_asset_partitions` would have been the direct tool, but Dagster 1.13's SQL event log
   storages (SQLite, PostgreSQL) raise NotImplementedError for it;
3. deletes the source's lag reports and its topics' observations but the newest
   (platform_assets/lag_reports.py: runless events that no run deletion takes);
4. moves the `retired_through` mark.

Guarantees:
- Runs inside the source's own delta run, after its snapshot landed and its tables were
  maintained: the run holds the source (one run at a time), so no delta run races it. A run that
  only re-runs old deltas (its last delta below `landed_through`) does not retire.
- Bounded: at most `MAX_PER_PASS` partitions deleted, and runs looked at (of the delta job, and
  of the UI backfills), per pass, so the first pass on an old deployment does not stall a delta;
  the next runs go on where it stopped.
  Batched: a pass starts once `every` deltas are retirable (maintenance's `every_deltas`).
- Crash-safe and idempotent: each step deletes what is still there; a kill between (or inside)
  steps leaves some of them done, and the next pass does the rest (the mark moves last). Nothing
  of the lake is touched, so nothing landed is lost.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import dagster as dg
# Not exported at the top level in Dagster 1.13; the instance's `get_backfills` takes them.
from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus
# The SQL event logs' table of check executions, which `delete_run` does not clear.
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable

from platform_assets.lag_reports import trim_lag_reports
from platform_assets.deltas.partitions import delta_partitions, partition_key, run_deltas
from platform_assets.deltas.requests import PARTITION_TAG, deltas_of_run, source_tags as datamart_tags
from platform_assets.run_files import remove_run_files, sweep_orphans
from resources.failpoints import failpoint
from resources.state.delta_marks import DeltaMarks, Marks

# Partitions deleted, and runs looked at, per pass: about 12 s a pass on a SQLite instance on 2
# loaded cores (bench/partitions_bench.py: 9,000 deltas of a run each retired in 244 s, 20 passes).
MAX_PER_PASS = 500
BACKFILL_TAG = "dagster/backfill"  # Dagster's tag of a run a backfill launched: the backfill's id
FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
# A backfill still launching or canceling runs is left alone: its daemon iteration reads its runs.
DONE_BACKFILLS = [BulkActionStatus.COMPLETED, BulkActionStatus.COMPLETED_SUCCESS, BulkActionStatus.COMPLETED_FAILED,
                  BulkActionStatus.FAILED, BulkActionStatus.CANCELED]
HOW_TO_READ = ("Older deltas stay in the lake: `deltaport read SOURCE.TABLE --as-of-delta N` reads any of them, "
               "`deltaport rerun SOURCE N[-M]` (or adding the partition in the UI's backfill dialog) lands one again.")


@dataclass(frozen=True)
class Retired:
    through: int  # every delta up to this one now has no partition in Dagster
    partitions: int  # deleted by this pass
    runs: int  # deleted by this pass
    done: bool  # False: the pass hit its bound; the next run goes on
    seconds: float
    lag_reports: int = 0  # the source's older lag reports deleted by this pass (platform_assets/lag_reports.py)
    orphans: int = 0  # files and folders of runs no longer held, removed by this pass (platform_assets/run_files.py)


def retire_through(marks: Marks, *, window: int, every: int, run_last: int) -> int | None:
    """The delta this pass retires through, or None: no window, nothing landed, a run re-running
    old deltas, or fewer than `every` deltas retirable since the last pass."""
    if window <= 0 or marks.landed_through is None or run_last < marks.landed_through:
        return None
    cutoff = marks.landed_through - window
    if cutoff < 0:
        return None
    if marks.retired_through is not None and cutoff - marks.retired_through < max(1, every):
        return None
    return cutoff


def partitions_to_delete(keys: Iterable[str], cutoff: int, limit: int) -> list[str]:
    """The partition keys of deltas up to `cutoff`, oldest first, at most `limit`."""
    return sorted((k for k in keys if int(k) <= cutoff), key=int)[:limit]


def of_source(run: dg.DagsterRun, source: str) -> bool:
    """Whether `run` lands `source`'s deltas: its delta job's tag, or an asset selection holding
    one of its assets (one run of a backfill spans one partitions definition, so its partition
    tags are then the source's deltas)."""
    ((tag, value),) = datamart_tags(source).items()
    if tag in run.tags:
        return run.tags[tag] == value
    return any(key.path[0] == source for key in run.asset_selection or ())


def source_backfills(instance: dg.DagsterInstance, source: str, *, limit: int = MAX_PER_PASS) -> list[str]:
    """The ids of the finished backfills whose asset selection holds one of `source`'s assets,
    among the newest `limit` finished ones: a backfill's record stays after its runs are retired,
    and a pass reads a bounded number of them, not every backfill ever launched. A backfill's runs
    would be left behind only if `limit` newer backfills finished before the window moved past
    its deltas (500 backfills within a window of 2,000 deltas, a week at one every 5 minutes)."""
    done = instance.get_backfills(filters=BulkActionsFilter(statuses=DONE_BACKFILLS), limit=limit)
    return [b.backfill_id for b in done if any(key.path[0] == source for key in b.asset_selection or ())]


def retire(instance: dg.DagsterInstance, source: str, marks: DeltaMarks, cutoff: int, *,
           max_per_pass: int = MAX_PER_PASS, topics: Sequence[dg.AssetKey] = ()) -> Retired:
    """Retire `source`'s deltas up to `cutoff` from the instance (module docstring), at most
    `max_per_pass` partitions deleted and runs looked at. `topics`: its Kafka topics' assets,
    whose older observations go with its older lag reports."""
    started = time.monotonic()
    name = delta_partitions(source).name
    keys = partitions_to_delete(instance.get_dynamic_partitions(name), cutoff, max_per_pass + 1)
    more = len(keys) > max_per_pass
    keys = keys[:max_per_pass]
    for key in keys:
        instance.delete_dynamic_partition(name, key)
    failpoint("retire.partitions_deleted")
    through = int(keys[-1]) if more else cutoff
    runs = _delete_runs(instance, _old_runs(instance, source, cutoff, max_per_pass,
                                            _retired_keys(keys, marks.get(source).retired_through, through,
                                                          max_per_pass)))
    orphans = sweep_orphans(instance, limit=max_per_pass)
    reports = trim_lag_reports(instance, source, topics=topics)
    failpoint("retire.runs_deleted")
    marks.retired(source, through)
    return Retired(through, len(keys), runs, not more, time.monotonic() - started, reports, orphans)


def _retired_keys(deleted: list[str], before: int | None, through: int, limit: int) -> list[str]:
    """The partition keys whose one-partition runs this pass looks for: the partitions it deleted,
    and the deltas after the last pass's mark up to `through` (at most `limit`): a pass that died
    after deleting the partitions left those runs for this one."""
    since = [] if before is None else [partition_key(n) for n in range(before + 1, min(through, before + limit) + 1)]
    return sorted(set(deleted) | set(since), key=int)


def _old_runs(instance: dg.DagsterInstance, source: str, cutoff: int, limit: int,
              keys: list[str] = ()) -> list[str]:
    """The ids of `source`'s finished runs whose deltas are all up to `cutoff`, looking at the
    `limit` oldest of its delta job's and of its UI backfills', and at the one-partition runs of
    `keys` (the UI's "Materialize" of one partition: the implicit asset job, no deltaport or
    backfill tag). A run still in flight, or one whose tags name no delta, is kept."""
    filters = [dg.RunsFilter(tags=datamart_tags(source), statuses=FINISHED)]
    if backfills := source_backfills(instance, source, limit=limit):
        filters.append(dg.RunsFilter(tags={BACKFILL_TAG: backfills}, statuses=FINISHED))
    partition_filter = dg.RunsFilter(tags={PARTITION_TAG: list(keys)}, statuses=FINISHED) if keys else None
    if partition_filter is not None:
        filters.append(partition_filter)
    old: dict[str, None] = {}  # a job backfill's runs carry both tags: once
    for runs in filters:
        for run in instance.get_runs(filters=runs, limit=limit, ascending=True):
            if runs is partition_filter and BACKFILL_TAG in run.tags:
                continue  # a backfill's: looked at with its backfill, once that is done
            if of_source(run, source) and (d := deltas_of_run(run.tags)) is not None and max(d) <= cutoff:
                old[run.run_id] = None
    return list(old)


def _delete_runs(instance: dg.DagsterInstance, old: list[str]) -> int:
    """Delete the runs `old` with their events and files: first every run's events, in one
    connection, then run by run its files (compute logs; on SQLite its own event file:
    platform_assets/run_files.py) and its record. Killed before a record goes, the run is still
    there for the next pass to find; never a record gone and its events or files left."""
    storage = instance.event_log_storage
    if not hasattr(storage, "index_connection"):  # not a SQL event log (a plugin's): Dagster's own call
        for run_id in old:
            remove_run_files(instance, run_id)
            instance.delete_run(run_id)
            failpoint("retire.run_deleted")
        return len(old)
    # `delete_run` opens four to five connections a run (the record, the run's events, the index,
    # the concurrency slots), each a new one on PostgreSQL (dagster-postgres does not pool); on
    # SQLite it opens (and first checks the schema of) each run's own event file only to empty
    # it and leave it: 0.3-0.5 s a run on 2 loaded cores, and 300,000 emptied files. On
    # PostgreSQL the index connection reaches every event; on SQLite the index's rows, and the
    # run's own file goes with its compute logs below.
    with storage.index_connection() as conn:
        for run_id in old:
            storage.delete_events_for_run(conn, run_id)
        # ... and their check executions, which Dagster 1.13's `delete_run` leaves behind: one row
        # per check per delta, for ever, in the check's history.
        conn.execute(AssetCheckExecutionsTable.delete().where(AssetCheckExecutionsTable.c.run_id.in_(old)))
    for run_id in old:
        # Its files before its record: killed in between, the next pass finds the run again.
        remove_run_files(instance, run_id)
        instance.run_storage.delete_run(run_id)
        if storage.supports_global_concurrency_limits:
            storage.free_concurrency_slots_for_run(run_id)
        failpoint("retire.run_deleted")
    return len(old)


def record_landed(events: Iterator, *, marks: DeltaMarks, source: str, snapshot: dg.AssetKey,
                  deltas: list[int]) -> Iterator:
    """The step's events, passed on; when the snapshot's materialization comes by (its commits
    are done), the source's `landed_through` mark moves to the run's last delta first, so the mark
    never says more than the lake holds."""
    for event in events:
        if isinstance(event, dg.MaterializeResult) and event.asset_key == snapshot:
            marks.landed(source, deltas[-1])
        yield event


def retire_after_landing(context: dg.AssetExecutionContext, *, source: str, marks: DeltaMarks, window: int,
                         every: int) -> Iterator[dg.AssetObservation]:
    """The retirement pass of a delta run, once its snapshot landed; an observation on the
    snapshot saying what it did and where older deltas are read and re-run."""
    snapshot = dg.AssetKey([source, "snapshot"])
    if snapshot not in context.selected_asset_keys:
        return
    cutoff = retire_through(marks.get(source), window=window, every=every, run_last=run_deltas(context)[-1])
    if cutoff is None:
        return
    topics = sorted(k for k in context.assets_def.dependency_keys if k.path[0] == "kafka")  # its topics' assets
    done = retire(context.instance, source, marks, cutoff, topics=topics)
    said = (f"deltas up to {done.through} of {source} retired from Dagster (window {window}): {done.partitions} "
            f"partitions and {done.runs} runs deleted in {done.seconds:.2f} s"
            + ("" if done.done else "; the next run goes on") + f". {HOW_TO_READ.replace('SOURCE', source)}")
    context.log.info(said)
    yield dg.AssetObservation(asset_key=snapshot, description=said, metadata={
        "retired_through": dg.IntMetadataValue(done.through), "partition_window": dg.IntMetadataValue(window),
        "retired/partitions": dg.IntMetadataValue(done.partitions), "retired/runs": dg.IntMetadataValue(done.runs),
        "retired/seconds": dg.FloatMetadataValue(round(done.seconds, 3)),
        "retired/lag_reports": dg.IntMetadataValue(done.lag_reports),
        "retired/orphan_run_files": dg.IntMetadataValue(done.orphans),
        "older_deltas": dg.MarkdownMetadataValue(HOW_TO_READ.replace("SOURCE", source)),
        "first_partition": dg.TextMetadataValue(partition_key(done.through + 1))})
