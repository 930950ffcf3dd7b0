"""The sealing sensor of one change-stream source: new messages -> sealed deltas -> runs.

These sources have no DELTA_CLOSE, so each tick seals deltas itself (`resources.changestream.sealing.seal_topic`:
at most `max_messages` new messages read, cuts at the format's boundaries within the source's
row and time limits, the decision written to the durable ledger), then requests every sealed
delta from the cursor's `next` on, in order: dynamic partitions + runs of at most
`max_deltas_per_run` deltas (`run_key "<source>:<N>"` or `"<source>:<first>-<last>"`).
When nothing is sealable, the skip reason says why (limits not reached, a transaction still
open, ...). Bad messages are quarantined in the ledger with topic, partition and offset, logged,
and never block the good ones.

Restart safety: what was read and sealed lives in the ledger (one SQLite transaction per step);
the cursor holds `next`, which moves only past requested deltas, and what the last lag report
said (`lag`: platform_assets/lag.py reports only changes). A lost or reset cursor
resumes after the last delta whose snapshot landed (the state store's mark); Dagster drops a run
whose run_key it has seen: no duplicate.
"""



import dagster as dg

from platform_assets.config import SensorConfig, StreamConfig
from platform_assets.lag import landed_through, lag_events_if_changed, stream_lag, utc_now
from platform_assets.deltas.partitions import delta_partitions
from platform_assets.deltas.requests import MAX_DELTAS_PER_TICK, delta_runs, resume_cursor
from platform_assets.deltas.topic_observations import TopicRead, topic_observations_if_changed
from resources.errors import DeltaportError
from resources.changestream.resource import CdcLedgerResource
from resources.state.delta_marks import DeltaMarks
from resources.state.resource import StateStoreResource
from resources.kafka.resource import KafkaResource
from resources.changestream.sealing import SealPolicy, SealResult, seal_topic


def seal_policy(stream: StreamConfig) -> SealPolicy:
    return SealPolicy(stream.format, max_rows=stream.max_rows, max_seconds=stream.max_seconds,
                      lateness_seconds=stream.lateness_seconds, seal_idle_after_seconds=stream.idle_seconds)


def evaluate_stream(stream: StreamConfig, ledger, kafka: KafkaResource, cursor: dict, *, max_messages: int,
                    log=None) -> tuple[list[int], str | None, dict, SealResult]:
    """One tick, without Dagster: (deltas to request, why nothing more is due, new cursor, what
    sealing did). Shared by the sensor and `deltaport sync`."""
    result = seal_topic(kafka.bootstrap(), stream.topic, stream.name, ledger, seal_policy(stream),
                        max_messages=max_messages, consumer_config=kafka.client_config(),
                        timeout=kafka.timeout_seconds)
    if log:
        for err in result.errors:
            log.warning(f"quarantined: {err}")
        for warning in result.warnings:
            log.warning(warning)
        if result.new_deltas:
            log.info(f"sealed deltas {', '.join(str(d.delta_num) for d in result.new_deltas)} of {stream.name} "
                     f"({result.read} messages read)")
    nxt = int(cursor.get("next", 0))
    due = ledger.sealed_numbers(stream.name, nxt, MAX_DELTAS_PER_TICK)
    if due:
        nxt = due[-1] + 1
    waiting = None
    if not due:
        left = f"; {result.remaining} messages left to read" if result.remaining else ""
        waiting = f"{stream.name}: no new sealed delta: {result.waiting_reason or 'no new message'}{left}"
    return due, waiting, {"next": nxt}, result


def build_seal_sensor(*, stream: StreamConfig, job, settings: SensorConfig) -> dg.SensorDefinition:
    parts = delta_partitions(stream.name)

    @dg.sensor(name=f"{stream.name}_seal_sensor", job=job, minimum_interval_seconds=settings.interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Seals deltas of {stream.name} ({stream.format}) from {stream.topic} and requests "
                           "each sealed delta in order.")
    def seal_sensor(context: dg.SensorEvaluationContext, kafka: KafkaResource, ledger: CdcLedgerResource,
                    index: StateStoreResource):
        marks = DeltaMarks(index.store())  # what landed (resources/state/delta_marks.py), in the index's store
        cursor = resume_cursor(context, stream.name, marks)
        try:
            due, waiting, new_cursor, sealed = evaluate_stream(stream, ledger.get(), kafka, cursor,
                                                               max_messages=settings.max_messages_per_tick,
                                                               log=context.log)
        except DeltaportError as exc:
            context.log.error(f"{stream.name}: {exc}")  # fails the tick (see the datamart sensor)
            raise
        lag = stream_lag(stream, ledger.get(), landed_through(marks, context.instance, stream.name), utc_now())
        events, new_cursor = lag_events_if_changed(lag, settings.max_lag_seconds, before=cursor, after=new_cursor)
        seen, new_cursor = topic_observations_if_changed(
            {stream.topic: TopicRead(sealed.marks, ledger.get().quarantined_count(stream.name))},
            before=cursor, after=new_cursor)
        events = [*seen, *events]
        return delta_runs(context, parts, stream.name, due, waiting or "no new sealed delta", new_cursor,
                          settings.max_deltas_per_run, events, retry_after_seconds=settings.retry_after_seconds)

    return seal_sensor
