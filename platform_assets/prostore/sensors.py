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

import dagster as dg

from platform_assets.config import DatamartConfig, SensorConfig
from platform_assets.deltas.partitions import delta_partitions
from platform_assets.deltas.requests import MAX_DELTAS_PER_TICK, delta_runs, resume_cursor
from platform_assets.deltas.topic_observations import TopicRead, topic_observations_if_changed
from platform_assets.lag import landed_through, lag_events_if_changed, prostore_lag, utc_now
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
            due, waiting, new_cursor, stats = evaluate(datamart, index.get(), kafka, cursor,
                                                       max_messages=settings.max_messages_per_tick, log=context.log)
        except DeltaportError as exc:
            # A source that cannot be read (refused credentials, a denied topic, a snapshot that
            # contradicts the config) fails the tick: red in the UI, the cursor kept, and `sync`
            # exits 1. A source merely waiting is a skip.
            context.log.error(f"{datamart.name}: {exc}")
            raise
        lag = prostore_lag(datamart, index.get(), landed_through(marks, context.instance, datamart.name), utc_now())
        events, new_cursor = lag_events_if_changed(lag, settings.max_lag_seconds, before=cursor, after=new_cursor)
        seen, new_cursor = topic_observations_if_changed(
            {r.topic: TopicRead(r.marks, index.get().quarantined_count(r.topic)) for r in stats.values()},
            before=cursor, after=new_cursor)
        events = [*seen, *events]
        return delta_runs(context, parts, datamart.name, due, waiting or "no new closed delta", new_cursor,
                          settings.max_deltas_per_run, events, retry_after_seconds=settings.retry_after_seconds)

    return delta_close_sensor
