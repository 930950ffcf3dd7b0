"""The DELTA_CLOSE sensor of one datamart: new closed deltas whose backup is complete -> runs.

Each tick: index what is new in the signal topic and the backup topic (bounded by
`max_messages` each, so a tick stays far inside the sensor timeout), then walk the closed
deltas in order from the cursor's `next` delta: a delta whose chosen increment is complete gets
its dynamic partition and a run (`run_key "<datamart>:<N>"`); the first delta whose backup is
missing or incomplete stops the walk, so snapshots always advance in order, and the tick's skip
reason and log say which delta waits and why. DELTA_CANCEL needs no action: a cancelled number
is never closed unless reopened and closed again.

Restart safety: what was read lives in the delta index (durable, idempotent); the cursor holds
only `next`, the first delta not yet requested, and moves only past requested deltas. A reset
cursor re-requests from delta 0, and Dagster drops a run whose run_key it has seen: no duplicate.
"""


import json

import dagster as dg

from platform_assets.config import DatamartConfig, SensorConfig
from platform_assets.prostore.partitions import delta_partitions, partition_key
from resources.delta_index import CLOSED
from resources.errors import DeltaportError
from resources.index_resource import DeltaIndexResource
from resources.ingest import BACKUP, SIGNAL, ingest_topic
from resources.kafka.resource import KafkaResource

MAX_RUNS_PER_TICK = 50


def datamart_tags(datamart: str) -> dict[str, str]:
    # dagster.yaml limits runs to one per value of this tag: snapshots advance in order.
    return {"deltaport/datamart": datamart}


def evaluate(datamart: DatamartConfig, index, kafka: KafkaResource, cursor: dict, *, max_messages: int,
             log=None) -> tuple[list[int], str | None, dict, dict]:
    """One tick, without Dagster: (deltas to request, reason the next one waits, new cursor,
    ingestion stats). Shared by the sensor and `deltaport sync`."""
    bootstrap, conf = kafka.bootstrap(), kafka.client_config()
    stats = {}
    for topic, kind in ((datamart.signal_topic, SIGNAL), (datamart.backup_topic, BACKUP)):
        res = ingest_topic(bootstrap, topic, index, kind, max_messages=max_messages, consumer_config=conf,
                           timeout=kafka.timeout_seconds)
        stats[kind] = res
        for err in res.errors:
            if log:
                log.warning(f"quarantined: {err}")
    closed = index.deltas(datamart.name, CLOSED)
    nxt = int(cursor.get("next", min(closed, default=0)))
    due, waiting = [], None
    for n in sorted(d for d in closed if d >= nxt):
        if n != nxt:
            waiting = f"delta {nxt} of {datamart.name} is not closed in the signal topic yet (delta {n} is)"
            break
        report = index.delta_report(datamart.backup_topic, datamart.name, n)
        if report is None or not report.complete:
            why = "no message in the backup topic yet" if report is None else "; ".join(
                f"export {i.increment_id}: {', '.join(i.reasons)}" for i in report.increments)
            waiting = f"delta {n} of {datamart.name} is closed, its backup is not complete: {why}"
            break
        due.append(n)
        nxt = n + 1
        if len(due) >= MAX_RUNS_PER_TICK:
            break
    if waiting and log:
        log.info(waiting)
    return due, waiting, {"next": nxt}, stats


def build_delta_sensor(*, datamart: DatamartConfig, job,
                       settings: SensorConfig) -> dg.SensorDefinition:
    parts = delta_partitions(datamart.name)

    @dg.sensor(name=f"{datamart.name}_delta_close_sensor", job=job, minimum_interval_seconds=settings.interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Requests delta N of {datamart.name} once DELTA_CLOSE N is in {datamart.signal_topic} "
                           f"and its increment is complete in {datamart.backup_topic}.")
    def delta_close_sensor(context: dg.SensorEvaluationContext, kafka: KafkaResource, index: DeltaIndexResource):
        cursor = json.loads(context.cursor) if context.cursor else {}
        try:
            due, waiting, new_cursor, _ = evaluate(datamart, index.get(), kafka, cursor,
                                                   max_messages=settings.max_messages_per_tick, log=context.log)
        except DeltaportError as exc:
            context.log.error(str(exc))
            return dg.SensorResult(skip_reason=f"{datamart.name}: {exc}")
        return delta_runs(context, parts, datamart.name, due, waiting or "no new closed delta", new_cursor)

    return delta_close_sensor


def delta_runs(context: dg.SensorEvaluationContext, parts: dg.DynamicPartitionsDefinition, source: str,
               due: list[int], waiting: str, cursor: dict) -> dg.SensorResult:
    """The sensor's answer: a partition (when new) and a run (`run_key "<source>:<N>"`) per due
    delta, in order; else the reason nothing is due. Shared by every source's sensor."""
    existing = set(context.instance.get_dynamic_partitions(parts.name))
    new_keys = [partition_key(n) for n in due if partition_key(n) not in existing]
    runs = [dg.RunRequest(partition_key=partition_key(n), run_key=f"{source}:{n}", tags=datamart_tags(source))
            for n in due]
    return dg.SensorResult(
        run_requests=runs,
        skip_reason=None if runs else waiting,
        cursor=json.dumps(cursor),
        dynamic_partitions_requests=[parts.build_add_request(new_keys)] if new_keys else [],
    )
