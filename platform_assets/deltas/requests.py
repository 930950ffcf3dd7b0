"""How every source's sensor (and `sync`, `rerun`, the partition window) turns due deltas into
Dagster runs, and what it asks of the runs in flight.

What flows through: a source's due deltas, its cursor and the Dagster instance go in; run
requests come out: one run per delta, or partition-range runs of consecutive deltas
(`ranges`, `range_request`), keyed ``"<source>:<N>"`` or ``"<source>:<first>-<last>"`` so Dagster
drops a request it has seen. Guarantees: a source has one run in flight at a time (its runs
carry `source_tags`, which dagster.yaml limits to one run per value), so deltas that close
meanwhile wait and go in one range run; a run Dagster said it would retry and did not is
requested again once (`retry_request`); a lost cursor resumes after the last landed delta
(`resume_cursor`). Nothing here knows a source's format.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

import dagster as dg

from platform_assets.deltas.partitions import partition_key
from platform_assets.lag import landed_through
from resources.state.delta_marks import DeltaMarks

MAX_DELTAS_PER_TICK = 200  # requested per tick, in range runs; the rest on the next tick
# Dagster's tags of a partition-range run (what a backfill with a multi-run BackfillPolicy sets).
RANGE_START_TAG, RANGE_END_TAG = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
PARTITION_TAG = "dagster/partition"  # Dagster's tag of a one-partition run


def source_tags(source: str) -> dict[str, str]:
    # dagster.yaml limits runs to one per value of this tag: snapshots advance in order. The tag's
    # name says datamart for every source: run tags stored in Dagster's instance keep it.
    return {"deltaport/datamart": source}


def run_tags(datamart: str, first: int) -> dict[str, str]:
    """A delta run's tags: its datamart's, and a queue priority that puts earlier deltas first.
    A run retried after its worker died comes back with its parent's tags, so it goes ahead of
    the later ranges queued meanwhile (their snapshots would refuse to skip its deltas)."""
    return {**source_tags(datamart), "dagster/priority": str(-first)}


def resume_cursor(context: dg.SensorEvaluationContext, source: str, marks: DeltaMarks) -> dict:
    """The sensor's cursor. Without one (a new sensor, or a reset), resume after the last delta
    whose snapshot landed (the state store's mark, `platform_assets.lag.landed_through`): a reset
    re-requests nothing that landed (ranges may be cut differently than before, so run keys
    alone would not say so). Read from the mark, not by listing the instance's materialized
    partitions: those grow with the lake's age, and the window retires the old ones."""
    if context.cursor:
        return json.loads(context.cursor)
    landed = landed_through(marks, context.instance, source)
    if landed is None:
        return {}
    context.log.info(f"{source}: no cursor; resuming after delta {landed}, the last landed delta")
    return {"next": landed + 1}


def ranges(due: list[int], max_per_run: int) -> list[tuple[int, int]]:
    """Consecutive due deltas cut into (first, last) ranges of at most `max_per_run`."""
    out: list[tuple[int, int]] = []
    for n in due:
        if out and n == out[-1][1] + 1 and n - out[-1][0] < max_per_run:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


def range_request(source: str, first: int, last: int) -> dg.RunRequest:
    """One run of deltas first..last: a partition run for one delta, a partition-range run
    (Dagster's range tags, as a backfill with a multi-run BackfillPolicy makes) for several.
    The run key names the whole range: a range never hides a delta it does not cover."""
    if first == last:
        return dg.RunRequest(partition_key=partition_key(first), run_key=f"{source}:{first}", tags=run_tags(source, first))
    # The runs list shows a range run's tags, not its range tags: "deltaport/deltas" names them there.
    return dg.RunRequest(run_key=f"{source}:{first}-{last}",
                         tags={**run_tags(source, first), RANGE_START_TAG: partition_key(first),
                               RANGE_END_TAG: partition_key(last), "deltaport/deltas": f"{first}-{last}"})


def deltas_of_run(tags: Mapping[str, str]) -> list[int] | None:
    """The deltas a delta run covers, from its tags; None when the tags do not say."""
    if RANGE_START_TAG in tags and RANGE_END_TAG in tags:
        return list(range(int(tags[RANGE_START_TAG]), int(tags[RANGE_END_TAG]) + 1))
    if PARTITION_TAG in tags:
        return [int(tags[PARTITION_TAG])]
    return None


def request_deltas(request: dg.RunRequest) -> list[int]:
    """The deltas a run request (single or range) covers."""
    return deltas_of_run(request.tags or {}) or [int(request.partition_key)]


# A run that has not ended: it holds (or waits for) its source's one run slot.
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def runs_in_flight(instance: dg.DagsterInstance, source: str, limit: int | None = None) -> list[dg.DagsterRun]:
    """The runs of `source` that have not ended (queued, starting, running), newest first."""
    return list(instance.get_runs(filters=dg.RunsFilter(tags=source_tags(source), statuses=IN_FLIGHT), limit=limit))


def run_in_flight(instance: dg.DagsterInstance, source: str) -> dg.DagsterRun | None:
    """A run of `source` that has not ended, if any."""
    runs = runs_in_flight(instance, source, limit=1)
    return runs[0] if runs else None


# Dagster's run tags for its run retries (dagster.yaml `run_retries`).
WILL_RETRY_TAG, AUTO_RETRY_RUN_ID_TAG, MAX_RETRIES_TAG = "dagster/will_retry", "dagster/auto_retry_run_id", "dagster/max_retries"
RETRY_OF_TAG = "deltaport/retry_of"  # on a run the sensor requested in place of a retry that never came


def awaited_retry(record: dg.RunRecord | None, now: float) -> tuple[dg.DagsterRun, float] | None:
    """(the run, seconds since it ended) when `record`, a source's newest run, failed and Dagster
    said it would retry it (`dagster/will_retry: true`) but has not launched the retry: a retry
    is a newer run, and Dagster tags the failed run with its id. Only a run Dagster can retry
    counts (one with a job origin: launched by the daemon or the UI, not `sync`'s in-process runs)."""
    if record is None:
        return None
    run = record.dagster_run
    if (run.status != dg.DagsterRunStatus.FAILURE or run.tags.get(WILL_RETRY_TAG) != "true"
            or AUTO_RETRY_RUN_ID_TAG in run.tags or run.remote_job_origin is None or not deltas_of_run(run.tags)):
        return None
    ended = record.end_time or record.update_timestamp.timestamp()
    return run, max(0.0, now - ended)


def source_awaited_retry(instance: dg.DagsterInstance, source: str) -> tuple[dg.DagsterRun, float] | None:
    """`awaited_retry` of `source`'s newest run, now (one run record read)."""
    newest = instance.get_run_records(dg.RunsFilter(tags=source_tags(source)), limit=1)
    return awaited_retry(newest[0] if newest else None, time.time())


def retry_request(instance: dg.DagsterInstance, source: str, failed: dg.DagsterRun) -> dg.RunRequest:
    """The run of a failed run's deltas, in place of the retry Dagster did not launch. It counts
    as one of the failed run's retries: it may be retried `max_retries` minus the retries its
    run group has had, so a run that crashes again and again still stops."""
    deltas = deltas_of_run(failed.tags)
    request = range_request(source, deltas[0], deltas[-1])
    max_retries = int(failed.tags.get(MAX_RETRIES_TAG, instance.run_retries_max_retries))
    try:
        _, group = instance.get_run_group(failed.run_id) or (None, [failed])
    except dg.DagsterRunNotFoundError:  # its root run retired by the partition window
        group = [failed]
    return dg.RunRequest(partition_key=request.partition_key, run_key=f"{request.run_key}:retry-of-{failed.run_id}",
                         tags={**request.tags, RETRY_OF_TAG: failed.run_id,
                               MAX_RETRIES_TAG: str(max(0, max_retries - len(list(group))))})


def delta_runs(context: dg.SensorEvaluationContext, parts: dg.DynamicPartitionsDefinition, source: str,
               due: list[int], waiting: str, cursor: dict, max_per_run: int,
               asset_events: list | None = None, retry_after_seconds: float = 60.0) -> dg.SensorResult:
    """The sensor's answer: the partitions (when new) and the runs of the due deltas, in order,
    at most `max_per_run` deltas per run; else the reason nothing is due. Shared by every
    source's sensor.

    While a run of the source has not ended, due deltas are not requested yet (the cursor stays
    at the first of them): a source runs one run at a time, so a run requested now would only
    queue; requested when the run in flight ends, everything that closed meanwhile goes in one
    range run. Deltas closing faster than a run lands them so become few large runs (fixed cost
    per run, not per delta) instead of a queue of one-delta runs.

    Likewise while the source's newest run failed and awaits the retry Dagster said it would
    launch (`awaited_retry`); if none has come `retry_after_seconds` after the failure, the
    answer is that retry (`retry_request`), once, and the due deltas wait for it."""
    # Asked per due delta, not by listing every partition: a lake's partitions grow with its age.
    new_keys = [partition_key(n) for n in due if not context.instance.has_dynamic_partition(parts.name, partition_key(n))]
    busy = run_in_flight(context.instance, source) if due else None
    if busy is not None:
        waiting = (f"{source}: deltas {due[0]}..{due[-1]} wait for run {busy.run_id[:8]} ({busy.status.value}) "
                   f"to end, to be requested together (up to {max_per_run} per run)")
        context.log.info(waiting)
        due, cursor = [], {**cursor, "next": due[0]}
    retry = None
    if busy is None:
        awaited = source_awaited_retry(context.instance, source)
        if awaited is not None:
            # A later range must not go first: its snapshot would refuse to skip the failed run's
            # deltas, a step failure, which run_retries do not retry.
            run, waited = awaited
            if waited < retry_after_seconds:
                waiting = (f"{source}: run {run.run_id[:8]} failed {waited:.0f} s ago and Dagster will retry it "
                           "(run_retries); later deltas wait for the retry")
            else:
                retry = retry_request(context.instance, source, run)
                waiting = (f"{source}: run {run.run_id[:8]} failed {waited:.0f} s ago, Dagster said it would retry it "
                           f"and has not: its deltas are requested again ({retry.run_key})")
                context.log.warning(waiting)
            if due:
                due, cursor = [], {**cursor, "next": due[0]}
    runs = [retry] if retry else [range_request(source, first, last) for first, last in ranges(due, max_per_run)]
    return dg.SensorResult(
        run_requests=runs,
        skip_reason=None if runs else waiting,
        cursor=json.dumps(cursor),
        dynamic_partitions_requests=[parts.build_add_request(new_keys)] if new_keys else [],
        asset_events=asset_events or [],  # the source's lag (platform_assets/lag.py)
    )
