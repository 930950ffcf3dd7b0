"""The delta sensor of one datamart: new closed deltas whose backup is complete -> runs.

Each tick: index what is new in the signal topic and the backup topic (bounded by
`max_messages` each, so a tick stays far inside the sensor timeout), then walk the closed
deltas in order from the cursor's `next` delta: each delta whose chosen increment is complete
gets its dynamic partition; the due deltas go in runs of at most `max_deltas_per_run`
consecutive ones (`run_key "<datamart>:<N>"`, or `"<datamart>:<first>-<last>"` for a range run);
the first delta whose backup is missing or incomplete stops the walk, so a range never crosses
a lagging delta, snapshots always advance in order, and the tick's skip reason and log say
which delta waits and why. A complete delta's chunks are first checked against its own
changelog (resources/prostore/chunk_check.py): a chunk that cannot land (a writer schema that
does not fit the DDL, or lacks a key column) is quarantined, a hole, so its delta waits, named
with the chunk's topic, partition, offset and reason, and the deltas before it are due.
The first delta is chosen once the topic naming the deltas (the signal topic; the backup topic
of a backup-only datamart) is read through, so a number claimed ahead of the real ones cannot
become the start. A backup-only datamart (no signal topic) walks the deltas its backup topic
holds instead of the closed ones: a number missing from the topic holds the ones after it,
visibly, as a lagging backup does (the seed lets "all new deltas" exports leave gaps that are
never filled; landing past one would skip its changes in every snapshot after it).
A source with a `bootstrap` also reads its snapshot topic: once that is read through and holds
one whole snapshot (resources/prostore/snapshot_bootstrap.py), the walk starts at its base delta
B = last_delta - depth and takes B..last_delta from the snapshot, then the live deltas; a second
snapshot in the topic fails the tick loudly and lands nothing of the source.
DELTA_CANCEL needs no action: a cancelled number is never closed unless reopened and closed
again, so a range never holds one.

Restart safety: what was read lives in the delta index (durable, idempotent); the cursor holds
only `next`, the first delta not yet requested, and moves only past requested deltas. A lost
or reset cursor resumes after the last delta whose snapshot landed, as the state store's mark
says (`resume_cursor`; resources/state/delta_marks.py); Dagster drops a run whose run_key it has
seen: no duplicate.
"""


import json
import time
from collections.abc import Mapping

import dagster as dg

from platform_assets.config import DatamartConfig, SensorConfig
from platform_assets.lag import landed_through, lag_events_if_changed, prostore_lag, utc_now
from platform_assets.prostore.partitions import delta_partitions, partition_key
from resources.codecs.backup import iter_rows
from resources.prostore.delta_index import CLOSED
from resources.errors import DeltaportError
from resources.prostore.resource import DeltaIndexResource
from resources.prostore.ingest import BACKUP, SIGNAL, ingest_topic
from resources.kafka.fetch import fetch_values
from resources.kafka.resource import KafkaResource
from resources.prostore.chunk_check import checked_report
from resources.prostore.snapshot_bootstrap import Bootstrap, check_against_live, plan_bootstrap
from resources.state.delta_marks import DeltaMarks

SNAPSHOT = "snapshot"  # the role of a bootstrap's snapshot topic in a tick's ingestion stats
MAX_DELTAS_PER_TICK = 200  # requested per tick, in range runs; the rest on the next tick
# Dagster's tags of a partition-range run (what a backfill with a multi-run BackfillPolicy sets).
RANGE_START_TAG, RANGE_END_TAG = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
PARTITION_TAG = "dagster/partition"  # Dagster's tag of a one-partition run


def datamart_tags(datamart: str) -> dict[str, str]:
    # dagster.yaml limits runs to one per value of this tag: snapshots advance in order.
    return {"deltaport/datamart": datamart}


def run_tags(datamart: str, first: int) -> dict[str, str]:
    """A delta run's tags: its datamart's, and a queue priority that puts earlier deltas first.
    A run retried after its worker died comes back with its parent's tags, so it goes ahead of
    the later ranges queued meanwhile (their snapshots would refuse to skip its deltas)."""
    return {**datamart_tags(datamart), "dagster/priority": str(-first)}


def evaluate(datamart: DatamartConfig, index, kafka: KafkaResource, cursor: dict, *, max_messages: int,
             log=None) -> tuple[list[int], str | None, dict, dict]:
    """One tick, without Dagster: (deltas to request, reason the next one waits, new cursor,
    ingestion stats). Shared by the sensor and `deltaport sync`."""
    bootstrap, conf = kafka.bootstrap(), kafka.client_config()
    stats = {}
    topics = [(datamart.backup_topic, BACKUP, BACKUP)]
    if not datamart.backup_only:
        topics.insert(0, (datamart.signal_topic, SIGNAL, SIGNAL))
    if datamart.bootstrap:
        topics.append((datamart.bootstrap.topic, BACKUP, SNAPSHOT))
    for topic, kind, role in topics:
        res = ingest_topic(bootstrap, topic, index, kind, max_messages=max_messages, consumer_config=conf,
                           timeout=kafka.timeout_seconds)
        stats[role] = res
        for err in res.errors:
            if log:
                log.warning(f"quarantined: {err}")
    boot, keep = None, {}
    if datamart.bootstrap:
        boot, why = _bootstrap(datamart, index, cursor, stats[SNAPSHOT])
        if boot is None:
            return [], why, _unread({k: v for k, v in cursor.items() if k != "unread"}, stats), stats
        keep = {"bootstrap_depth": boot.depth}
        if boot.depth and not cursor.get("bootstrap_checked"):
            _check_live(datamart, index, kafka, boot, log)
        if boot.depth:
            keep["bootstrap_checked"] = True
    # Where a source starts is chosen only once the topic that names its deltas has been read
    # through: its first delta may sit behind this tick's reading budget, and a message ahead
    # of it claiming delta 1000000000 must not become the start (every real delta would wait).
    naming, role = (datamart.backup_topic, BACKUP) if datamart.backup_only else (datamart.signal_topic, SIGNAL)
    if "next" not in cursor and stats[role].remaining and boot is None:
        return [], (f"reading {naming} before choosing the first delta of {datamart.name}: "
                    f"{stats[role].remaining} messages left"), _unread({}, stats), stats
    # With a cursor, only the deltas from its `next` on can be due: read those, not the lake's history.
    start = int(cursor.get("next", 0))
    if datamart.backup_only:
        candidates = index.backup_deltas(datamart.backup_topic, datamart.name, start=start)

        def gap(nxt: int, n: int) -> str:
            return (f"delta {nxt} of {datamart.name} is not in {datamart.backup_topic} yet (delta {n} is): "
                    "a backup-only source lands its deltas in order")
    else:
        candidates = list(index.deltas(datamart.name, CLOSED, start=start))

        def gap(nxt: int, n: int) -> str:
            return f"delta {nxt} of {datamart.name} is not closed in the signal topic yet (delta {n} is)"
    if boot is not None:
        # The snapshot's deltas are the source's base..M; the live ones go on after M.
        candidates = [*range(boot.base, boot.last_delta + 1), *(n for n in candidates if n > boot.last_delta)]
    nxt = int(cursor.get("next", min(candidates, default=0)))
    due, waiting = [], None
    for n in sorted(d for d in candidates if d >= nxt):
        if n != nxt:
            waiting = gap(nxt, n)
            break
        if boot is not None and boot.covers(n):
            topic, number = boot.topic, boot.snapshot_delta(n)
            state = f"is delta {number} of the snapshot in {topic}"
        else:
            topic, number = datamart.backup_topic, n
            state = "is in the backup topic" if datamart.backup_only else "is closed"
        report = checked_report(index, topic, datamart.name, number)
        if report is None or not report.complete:
            why = f"no message in {topic} yet" if report is None else _why_incomplete(report)
            waiting = f"delta {n} of {datamart.name} {state}, its backup is not complete: {why}"
            waiting += refused(index, topic, datamart.name, number)
            break
        due.append(n)
        nxt = n + 1
        if len(due) >= MAX_DELTAS_PER_TICK:
            break
    if waiting and log:
        log.info(waiting)
    return due, waiting, _unread({"next": nxt, **keep}, stats), stats


def refused(index, topic: str, datamart: str, delta_num: int, shown: int = 3) -> str:
    """What a waiting delta's reason adds for its chunks quarantined after they were indexed
    (refused by their changelog: resources/prostore/chunk_check.py), where and why."""
    chunks = index.quarantined_chunks(topic, datamart, delta_num)
    said = [f"{c['kind']} at topic {topic!r} partition {c['partition']} offset {c['offset']}: {c['reason']}"
            for c in chunks[:shown]]
    more = f"; and {len(chunks) - shown} more" if len(chunks) > shown else ""
    return f"; quarantined: {'; '.join(said)}{more}" if chunks else ""


def _why_incomplete(report, shown: int = 5) -> str:
    """Why each export of a delta is incomplete: the latest `shown` of them, the rest counted."""
    latest = report.increments[-shown:]
    text = "; ".join(f"export {i.increment_id}: {', '.join(i.reasons)}" for i in latest)
    more = len(report.increments) - len(latest)
    return text + (f"; and {more} older incomplete export(s)" if more else "")


def _check_live(datamart: DatamartConfig, index, kafka: KafkaResource, boot: Bootstrap, log) -> None:
    """Compare the snapshot's last delta with the live increment of the same source delta (a
    contradiction raises BootstrapError; no complete live delta: nothing to compare with)."""
    live = index.delta_report(datamart.backup_topic, datamart.name, boot.last_delta)
    if live is None or not live.complete:
        if log:
            log.info(f"bootstrap of {datamart.name}: {datamart.backup_topic} has no complete delta {boot.last_delta} "
                     "to check the snapshot against")
        return
    counts = [_rows_per_table(kafka, topic, index.chosen_messages(topic, datamart.name, n)[1])
              for topic, n in ((boot.topic, boot.depth), (datamart.backup_topic, boot.last_delta))]
    check_against_live(boot, datamart.name, datamart.backup_topic, *counts)


def _rows_per_table(kafka: KafkaResource, topic: str, refs) -> dict[str, int]:
    data = [r for r in refs if r.table_name is not None]
    values = fetch_values(kafka.bootstrap(), topic, [(r.partition, r.offset) for r in data],
                          config=kafka.client_config(), timeout=kafka.timeout_seconds)
    out: dict[str, int] = {}
    for r in data:
        out[r.table_name] = out.get(r.table_name, 0) + sum(1 for _ in iter_rows(values[(r.partition, r.offset)]))
    return out


def _bootstrap(datamart: DatamartConfig, index, cursor: dict, read) -> tuple[Bootstrap | None, str | None]:
    """The source's bootstrap, or (None, why its deltas wait). A snapshot topic that holds a
    second snapshot, or one that contradicts the config, raises BootstrapError (a DeltaportError:
    the tick fails loudly and lands nothing of this source until the topic or the config is fixed)."""
    cfg = datamart.bootstrap
    started = int(cursor.get("next", -1)) > cfg.last_delta  # the snapshot's deltas are all requested
    if read.remaining and not started:  # its depth is known only once it is read through
        return None, f"reading the snapshot topic {cfg.topic} of {datamart.name}: {read.remaining} messages left"
    runs = index.export_runs(cfg.topic, datamart.name)
    depth = cursor.get("bootstrap_depth")
    boot = plan_bootstrap(cfg.topic, datamart.name, cfg.last_delta, runs,
                          known_depth=None if depth is None else int(depth))
    if boot is None:
        have = sorted(runs)
        return None, (f"the snapshot of {datamart.name} in {cfg.topic} is not all there yet: it holds deltas "
                      f"{', '.join(map(str, have)) or 'none'}")
    return boot, None


def _unread(cursor: dict, stats: dict) -> dict:
    """The cursor, saying how many messages the tick left unread (`sync` keeps ticking while
    there are: a tick with nothing due is idle only when the topics are read through)."""
    left = sum(r.remaining for r in stats.values())
    return {**cursor, "unread": left} if left else cursor


def build_delta_sensor(*, datamart: DatamartConfig, job,
                       settings: SensorConfig) -> dg.SensorDefinition:
    parts = delta_partitions(datamart.name)

    if datamart.backup_only:
        what = f"once its increment is complete in {datamart.backup_topic} (backup-only: in order, no signal topic)."
    else:
        what = (f"once DELTA_CLOSE N is in {datamart.signal_topic} and its increment is complete in "
                f"{datamart.backup_topic}.")
    if datamart.bootstrap:
        what += (f" Deltas up to {datamart.bootstrap.last_delta} come from the snapshot backup in "
                 f"{datamart.bootstrap.topic} (bootstrap), once it is all there.")

    @dg.sensor(name=f"{datamart.name}_delta_close_sensor", job=job, minimum_interval_seconds=settings.interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Requests delta N of {datamart.name} {what}")
    def delta_close_sensor(context: dg.SensorEvaluationContext, kafka: KafkaResource, index: DeltaIndexResource):
        marks = DeltaMarks(index.store())
        cursor = resume_cursor(context, datamart.name, marks)
        try:
            due, waiting, new_cursor, _ = evaluate(datamart, index.get(), kafka, cursor,
                                                   max_messages=settings.max_messages_per_tick, log=context.log)
        except DeltaportError as exc:
            # A source that cannot be read (refused credentials, a denied topic, a snapshot that
            # contradicts the config) fails the tick: red in the UI, the cursor kept, and `sync`
            # exits 1. A source merely waiting is a skip.
            context.log.error(f"{datamart.name}: {exc}")
            raise
        lag = prostore_lag(datamart, index.get(), landed_through(marks, context.instance, datamart.name), utc_now())
        events, new_cursor = lag_events_if_changed(lag, settings.max_lag_seconds, before=cursor, after=new_cursor)
        return delta_runs(context, parts, datamart.name, due, waiting or "no new closed delta", new_cursor,
                          settings.max_deltas_per_run, events, retry_after_seconds=settings.retry_after_seconds)

    return delta_close_sensor


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
    return list(instance.get_runs(filters=dg.RunsFilter(tags=datamart_tags(source), statuses=IN_FLIGHT), limit=limit))


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
    newest = instance.get_run_records(dg.RunsFilter(tags=datamart_tags(source)), limit=1)
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
