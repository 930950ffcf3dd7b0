"""The lag of a source as its topics say it now: what `deltaport status` prints and what the
check lag_within_bound's own execution (from the UI) reports.

A sensor tick indexes its topics before it computes the lag, so its numbers (the UI's plot)
are the sources' as of that tick. Between ticks, or with the daemon stopped, the state store's
view grows old: closes on the signal topic, backups and change-stream messages that no tick has
read are not in it. So `live_lag` reads the topics past the store's progress
(resources/kafka/unread.py: read-only, bounded) and adds what they hold to the store's view,
with the same arithmetic as the tick's (platform_assets/lag.py). Should a topic be out of reach
(the broker down, a timeout), the lag is the store's alone, marked `stale` with the reason and
the time of the last tick that read the topics (the last lag observation in the instance).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import dagster as dg

from platform_assets.lag import Lag, landed_through, prostore_lag, stream_lag, utc_now
from resources.errors import DeltaportError
from resources.kafka.unread import unread_closes, unread_messages

STATUS_TIMEOUT_SECONDS = 10.0  # a cron `status` with the broker down answers in seconds, not Kafka's 30
UNREAD_BUDGET = 5000  # messages read per topic past the store's progress; more are counted, not read


def live_lag(source, *, kind: str, instance: dg.DagsterInstance, kafka, marks, index=None, ledger=None,
             now: dt.datetime | None = None, timeout: float = STATUS_TIMEOUT_SECONDS) -> Lag:
    """`source`'s lag (a DatamartConfig with `index`, kind "prostore"; a StreamConfig with
    `ledger`, kind "stream"), the unread part of its topic included; `kafka`: a KafkaResource;
    `marks`: the DeltaMarks saying what landed."""
    now = now or utc_now()
    landed = landed_through(marks, instance, source.name)
    try:
        config = kafka.client_config()
        if kind == "prostore":
            topic, which = (source.backup_topic, "backup") if source.backup_only else (source.signal_topic, "signal")
            unread = unread_closes(kafka.bootstrap(), topic, index.progress(topic), datamart=source.name, kind=which,
                                   budget=UNREAD_BUDGET, config=config, timeout=timeout)
            return prostore_lag(source, index, landed, now, unread)
        progress = {p: pp.next_offset for p, pp in ledger.progress(source.name).items()}
        unread = unread_messages(kafka.bootstrap(), source.topic, progress, config=config, timeout=timeout)
        return stream_lag(source, ledger, landed, now, unread)
    except DeltaportError as exc:  # ScanError, no broker configured: the store's view, said to be old
        lag = prostore_lag(source, index, landed, now) if kind == "prostore" else stream_lag(source, ledger, landed, now)
        return replace(lag, stale=f"as of {_last_read(instance, source.name, now)} "
                                  f"(its topics could not be read now: {exc})")


def _last_read(instance: dg.DagsterInstance, source: str, now: dt.datetime) -> str:
    """When a tick last read the source's topics: its last lag observation in the instance."""
    records = instance.fetch_observations(dg.AssetKey([source, "snapshot"]), limit=1).records
    if not records:
        return "no read of its topics by any sensor tick or sync"
    when = dt.datetime.fromtimestamp(records[0].timestamp, dt.timezone.utc)
    return f"the last read of its topics, {when:%Y-%m-%d %H:%M:%S} UTC ({(now - when).total_seconds():.0f} s ago)"
