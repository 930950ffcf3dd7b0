"""How far behind its source the lake is, per source: the lag in deltas and in seconds.

What flows through: the state store's view of the source (closed or sealed deltas and their
times, and the last delta whose snapshot landed: resources/state/delta_marks.py). Out comes a
`Lag`:
- `deltas`: the deltas that are ready at the source and not landed yet;
- `seconds`: now minus the time of the oldest of them, 0 when there are none.

What "the time" is: when the delta became available to deltaport, never its business date.
A replayed topic, a backfill of last year's deltas or the demo's emulated February 2024 carry old
dates; their deltas are not late for that, only for waiting once they are in Kafka. Per kind:
- a signal-driven datamart: the Kafka time of the delta's DELTA_CLOSE message (the index keeps
  it; a close indexed before it did counts from its deltaDate);
- a backup-only datamart: the Kafka time of the delta's first message in the backup topic;
- a change stream: when the oldest sealed, unlanded delta was sealed, or the Kafka time of the
  oldest message read but not yet sealed, whichever is older.

Every sensor tick (the daemon's, and `sync`'s, which ticks after every run) computes it, and
reports, when what it says changed since the last report (`lag_events_if_changed`):
- an AssetObservation on `<source>/snapshot` with `lag_deltas` and `lag_seconds`, which the UI
  plots;
- an evaluation of the asset check `lag_within_bound`, which fails once `lag_seconds` passes
  `sensor.max_lag_seconds`.
"What it says" is the deltas behind, the landed mark, the messages not sealed or not read, the
verdict and whether the topics could be read; not the seconds alone, which grow on every tick
of a lagging source. A report on every tick would make the instance's events grow with its
ticks (a tick every 30 s: ~2 million events a year per source) rather than with what happened;
so an idle source adds none, and the last report's `lag_seconds` is as of that report (`deltaport
status` and the check's own execution compute it now).

The check's own execution (from the UI) computes the same thing on demand. `deltaport status`
prints it per source. Landing is in order, so "landed" is every delta up to the `landed_through`
mark the snapshot's step writes. Not the instance's materialized partitions: listing those grows
with the lake's age, and the partition window (platform_assets/retirement.py) drops old ones.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

import dagster as dg

LAG_CHECK = "lag_within_bound"


@dataclass(frozen=True)
class Lag:
    source: str
    deltas: int
    seconds: float
    oldest: int | None  # the oldest delta ready and not landed
    landed_through: int | None
    unsealed_messages: int = 0  # change streams: read, not sealed yet (or not read yet)
    unread: int = 0  # messages past the store's progress that the lag was not read from (lag_live.py)
    stale: str | None = None  # why the sources could not be read now: the lag is the store's alone

    def text(self) -> str:
        landed = "nothing landed yet" if self.landed_through is None else f"landed through delta {self.landed_through}"
        known = f" {self.stale}" if self.stale else ""
        if not self.deltas and not self.unsealed_messages and not self.unread:
            return f"{self.source}: {landed}; up to date{known}"
        behind = f"{self.deltas} delta{'s' if self.deltas != 1 else ''} behind"
        if self.oldest is not None:
            behind += f" (oldest: delta {self.oldest})"
        if self.unsealed_messages:
            behind += f", {self.unsealed_messages} messages not sealed yet"
        if self.unread:
            behind += f", and {self.unread} more messages not read by this check"
        return f"{self.source}: {landed}; {behind}, {self.seconds:.0f} s{known}"


def utc(value: str | int | dt.datetime) -> dt.datetime:
    """A time as the state store holds it (ISO text, naive meaning UTC; or epoch microseconds)."""
    if isinstance(value, int):
        return dt.datetime.fromtimestamp(value / 1e6, dt.timezone.utc)
    when = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def kafka_time(ms: int) -> dt.datetime:
    """A Kafka message's timestamp (epoch milliseconds) as a UTC time."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def landed_through(marks, instance: dg.DagsterInstance, source: str) -> int | None:
    """The last delta whose snapshot landed: the source's mark in the state store (`marks`: a
    DeltaMarks). A deployment older than the mark has none until its next run lands: then the
    instance's materialized snapshot partitions say it, read once and written as the mark."""
    landed = marks.get(source).landed_through
    if landed is not None:
        return landed
    keys = instance.get_materialized_partitions(dg.AssetKey([source, "snapshot"]))
    landed = max((int(k) for k in keys), default=None)
    if landed is not None:
        marks.landed(source, landed)
    return landed


def _lag(source: str, waiting: list[int], oldest_time: dt.datetime | None, landed: int | None,
         now: dt.datetime, unsealed_since: dt.datetime | None = None, unsealed: int = 0) -> Lag:
    """`waiting`: the deltas ready and not landed, in order; `oldest_time`: the first one's time."""
    starts = [t for t in (oldest_time, unsealed_since) if t is not None]
    seconds = max(0.0, (now - min(starts)).total_seconds()) if starts else 0.0
    return Lag(source, len(waiting), seconds, waiting[0] if waiting else None, landed, unsealed)


def prostore_lag(datamart, index, landed: int | None, now: dt.datetime, unread=None) -> Lag:
    """`datamart`: a DatamartConfig; `index`: its DeltaIndex; `unread`: what its topic holds past
    the index's progress (`resources.kafka.unread.Unread`), None for the index's view alone."""
    if datamart.backup_only:
        arrivals = index.backup_delta_arrivals(datamart.backup_topic, datamart.name, after=landed)
        times = {n: kafka_time(ms) for n, ms in arrivals.items() if ms is not None}
    else:
        closed = index.deltas(datamart.name, "closed", start=0 if landed is None else landed + 1)
        times = {n: kafka_time(d["closed_ms"]) if d.get("closed_ms") is not None else utc(d["delta_date"])
                 for n, d in closed.items() if d.get("closed_ms") is not None or d["delta_date"]}
    for n, when in (unread.closes.items() if unread is not None else ()):
        if landed is None or n > landed:
            times[n] = min(times.get(n, when), when)
    waiting = sorted(times)
    lag = _lag(datamart.name, waiting, min(times.values()) if times else None, landed, now)
    return replace(lag, unread=unread.unread_beyond_budget) if unread is not None else lag


def stream_lag(stream, ledger, landed: int | None, now: dt.datetime, unread=None) -> Lag:
    """`stream`: a StreamConfig; `ledger`: its CdcLedger; `unread`: what its topic holds past the
    ledger's progress (`resources.kafka.unread.Unread`: not sealed yet, as the ledger's marks)."""
    numbers = ledger.sealed_numbers(stream.name, start=0 if landed is None else landed + 1)
    oldest = utc(ledger.delta(stream.name, numbers[0]).sealed_at) if numbers else None
    marks = [m for ms in ledger.tail(stream.name).marks.values() for m in ms]
    stamps = [dt.datetime.fromtimestamp(m.ts_ms / 1000, dt.timezone.utc) for m in marks if m.ts_ms is not None]
    if unread is not None and unread.oldest is not None:
        stamps.append(unread.oldest)
    unsealed = len(marks) + (unread.messages if unread is not None else 0)
    return _lag(stream.name, numbers, oldest, landed, now, min(stamps, default=None), unsealed)


def lag_metadata(lag: Lag) -> dict:
    return {"lag_deltas": dg.IntMetadataValue(lag.deltas), "lag_seconds": dg.FloatMetadataValue(lag.seconds),
            "landed_through": dg.IntMetadataValue(-1 if lag.landed_through is None else lag.landed_through),
            "unsealed_messages": dg.IntMetadataValue(lag.unsealed_messages)}


def lag_evaluation(lag: Lag, max_lag_seconds: float) -> dg.AssetCheckEvaluation:
    """`lag_within_bound`'s verdict on `lag`: passed while lag_seconds <= max_lag_seconds."""
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey([lag.source, "snapshot"]), check_name=LAG_CHECK, passed=lag.seconds <= max_lag_seconds,
        metadata={**lag_metadata(lag), "max_lag_seconds": dg.FloatMetadataValue(max_lag_seconds)},
        description=lag.text())


def lag_events(lag: Lag, max_lag_seconds: float) -> list:
    """The observation and the check evaluation a tick reports for `lag`."""
    observation = dg.AssetObservation(asset_key=dg.AssetKey([lag.source, "snapshot"]), metadata=lag_metadata(lag),
                                      description=lag.text())
    return [observation, lag_evaluation(lag, max_lag_seconds)]


def lag_said(lag: Lag, max_lag_seconds: float) -> list:
    """What a report of `lag` says, as the sensor's cursor keeps it (JSON): all but the seconds,
    which count only through the verdict."""
    return [lag.deltas, lag.landed_through, lag.unsealed_messages, lag.unread, lag.seconds <= max_lag_seconds,
            lag.stale is not None]


def lag_events_if_changed(lag: Lag, max_lag_seconds: float, *, before: dict, after: dict) -> tuple[list, dict]:
    """The tick's lag events and its new cursor: the events only when what they say differs from
    the last report's (`before`'s "lag": the tick's cursor as it came), which `after` (the
    cursor the tick saves) then carries on."""
    said = lag_said(lag, max_lag_seconds)
    if before.get("lag") == said:
        return [], {**after, "lag": said}
    return lag_events(lag, max_lag_seconds), {**after, "lag": said}


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)
