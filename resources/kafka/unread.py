"""What a source's topic holds past what the state store has read: the part of the lag that no
sensor tick has seen yet (`deltaport status` run from cron while the daemon is stopped, or
between ticks).

In: the topic, the store's progress per partition ({partition: next offset}), a budget of
messages. Out: `Unread`, the messages past the progress, and what the first `budget` of them say:
- a signal topic: the DELTA_CLOSE events of a datamart (`closes`, delta -> the close's Kafka time);
- a backup topic: the deltas its keys name (`closes`, delta -> the Kafka time of its first message);
- a change stream's topic: only the Kafka time of the oldest unread message per partition
  (`oldest`), one message read per partition.

Guarantees: read-only (nothing is indexed, no offset committed; the sensor's own tick indexes
what it reads, transactionally); bounded: at most `budget` messages are fetched, those past it
are counted in `messages` and `unread_beyond_budget`, never read; a message that does not
decode is counted in `undecodable`, not an error (the sensor quarantines it, naming its
offset); a broker that cannot be reached raises `ScanError` within `timeout`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from resources.codecs.backup import decode_backup_key
from resources.codecs.signal import DeltaClose, decode_signal
from resources.errors import DecodeError
from resources.kafka.scan import scan, topic_ranges


@dataclass
class Unread:
    topic: str
    messages: int = 0  # past the store's progress, all partitions
    closes: dict[int, dt.datetime] = field(default_factory=dict)  # delta -> its time (UTC), of the budget read
    oldest: dt.datetime | None = None  # Kafka time of the oldest unread message (UTC)
    undecodable: int = 0
    unread_beyond_budget: int = 0


def _pending(marks: Mapping[int, tuple[int, int]], progress: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """{partition: (first unread offset, high watermark)} of the partitions with something unread
    (the low watermark where retention removed what the store would read next)."""
    pending = {p: (max(progress.get(p, lo), lo), hi) for p, (lo, hi) in marks.items()}
    return {p: r for p, r in pending.items() if r[1] > r[0]}


def _budgeted(pending: Mapping[int, tuple[int, int]], budget: int) -> dict[int, tuple[int, int]]:
    """The first messages of each partition, `budget` in all, shared evenly (older first in each)."""
    share = max(1, budget // max(1, len(pending)))
    return {p: (lo, min(hi, lo + share)) for p, (lo, hi) in pending.items()}


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def unread_closes(bootstrap: str, topic: str, progress: Mapping[int, int], *, datamart: str, kind: str,
                  budget: int = 5000, config: Mapping[str, object] | None = None,
                  timeout: float = 10.0) -> Unread:
    """The deltas of `datamart` that the unread part of `topic` closes (`kind` "signal": its
    DELTA_CLOSE events) or names (`kind` "backup": its backup keys), with their times."""
    pending = _pending(topic_ranges(bootstrap, topic, config=config, timeout=timeout), progress)
    out = Unread(topic, messages=sum(hi - lo for lo, hi in pending.values()))
    ranges = _budgeted(pending, budget)
    out.unread_beyond_budget = out.messages - sum(hi - lo for lo, hi in ranges.values())
    for msg in scan(bootstrap, topic, ranges, config=config, timeout=timeout):
        when = _utc(msg.timestamp_ms)
        out.oldest = when if out.oldest is None else min(out.oldest, when)
        try:
            if kind == "signal":
                event = decode_signal(msg.key or b"", msg.value)
                # The Kafka time, not the delta's date: lag counts from when a delta became
                # available (platform_assets/lag.py), the same times the index keeps.
                if event.datamart == datamart and isinstance(event.value, DeltaClose):
                    out.closes[event.value.delta_num] = min(out.closes.get(event.value.delta_num, when), when)
            else:
                key = decode_backup_key(msg.key or b"")
                if key.datamart == datamart:
                    out.closes[key.delta_num] = min(out.closes.get(key.delta_num, when), when)
        except DecodeError:
            out.undecodable += 1
    return out


def unread_messages(bootstrap: str, topic: str, progress: Mapping[int, int], *,
                    config: Mapping[str, object] | None = None, timeout: float = 10.0) -> Unread:
    """How many messages of `topic` are past `progress`, and the Kafka time of the oldest of them
    (the first unread message of each partition: one message read per partition)."""
    pending = _pending(topic_ranges(bootstrap, topic, config=config, timeout=timeout), progress)
    out = Unread(topic, messages=sum(hi - lo for lo, hi in pending.values()))
    firsts = {p: (lo, lo + 1) for p, (lo, _) in pending.items()}
    for msg in scan(bootstrap, topic, firsts, config=config, timeout=timeout):
        when = _utc(msg.timestamp_ms)
        out.oldest = when if out.oldest is None else min(out.oldest, when)
    return out
