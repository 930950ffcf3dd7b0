"""Sealing deltas of sources with no DELTA_CLOSE: Qlik Replicate, DataWorks, Datastream.

Flow: `seal_topic` reads what is new in a source's topic after the ledger's progress (at most
`max_messages`, shared fairly between partitions), decodes each message with the format's
decoder (the Qlik decoder primed with the metadata messages the ledger kept), turns it into a
*mark* (what kind of boundary it is, event time, watermark, rows) and appends the marks to the
`CdcLedger` in batches, each atomically with the progress and running state it reaches. Then it
seals as many deltas as the rules below allow, each in one ledger transaction (its ranges, the
removal of its marks, each partition's `sealed_to`): a crash leaves the old state or the new.

What delta N is: one offset range per partition. Each range starts where delta N-1's ended (the
partition's low watermark, seen when it was first scanned, for its first delta) and ends right
after a boundary message. Once sealed it never changes: retention deleting its messages later
only makes them unreadable, it never moves a range; a range may start on offsets retention
deleted before they were scanned (nothing of them is readable).

Boundaries (a cut right after the message is allowed):
- Qlik: a data message with `transactionLastEvent` true that ends the open transaction; outside
  a transaction also a metadata message or a REFRESH (full-load) row; a change with no
  transaction flag at all counts as its own transaction. A copy of a change older than the last
  transaction end seen (at-least-once delivery) is never a boundary and never reopens a
  transaction. Watermark: the greatest `headers.timestamp` seen.
- DataWorks: a MHEARTBEAT newer than the last one, outside a transaction and not between the
  two halves of an update (UPDATE_BEFOR / UPDATE_AFTER). A heartbeat inside a transaction is
  carried to the TRANSACTION_END (or XACOMMIT) that closes it, which becomes the boundary. Any
  other TRANSACTION_END is a boundary for row-limit cuts only ("soft"). Messages re-sent after a
  failover (sequenceId not above the greatest seen) change nothing. Rows outside transactions
  (full load) are cut only at heartbeats. Watermark: the greatest eventTime seen.
- Datastream: every message; its watermark is the greatest source_timestamp seen minus
  `lateness_seconds` (events arrive out of order, at most that late): on one partition, every
  event up to a delta's watermark is in that delta or an earlier one, as long as no event is
  later than `lateness_seconds`.
A bad message (quarantined with its kind, topic, partition and offset) is never a boundary in
Qlik and DataWorks (it does not change the running state) and is one in Datastream; it is kept
in the range of whichever delta covers its offset, and never blocks sealing.

When a delta is sealed: walk the unsealed messages in order (watermark, then partition, offset)
and find the first one at which a limit is exceeded: the rows so far > `max_rows`, or its
watermark - the delta's start > `max_seconds` (start: the previous delta's watermark, or the
first watermark of the tail for delta 0). Nothing exceeded: wait. Else cut at the LAST
boundary before that message (soft ones too if the row limit was exceeded, only hard ones for
the time limit), so the delta keeps both limits. If there is none (one transaction longer than
`max_rows`, or no watermark within `max_seconds`), cut at the FIRST boundary after it, never
inside a transaction, with a warning; if that has not arrived yet, wait and say why in
`waiting_reason`. The first limit exceeded is a property of the messages alone, so on one
partition the cuts do not depend on how reads were split into calls (restarts give the same
deltas; the ledger also keeps them).
Idle flush: with `seal_idle_after_seconds`, when every partition is read to its end and no
message arrived (Kafka timestamp) for that long, the tail is sealed up to its last boundary, so a
quiet source's last changes land.

Multi-partition topics: the walk above runs on all partitions' messages merged by watermark;
at the chosen cut (watermark W) each partition's range ends after its last allowed boundary
among the merged messages up to the cut (so its watermark is <= W); a partition with none
contributes an empty range. A delta's watermark is the cut's, but never below the previous
delta's (a lagging partition may offer an older one). This is a simple rule, not an ordering
or completeness guarantee across partitions: the lake restores the order across partitions
with order keys at apply time, so its correctness does not depend on where partitions are cut.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from resources.changestream.ledger import (
    HARD,
    SOFT,
    CdcLedger,
    LedgerConflict,
    Mark,
    PartitionProgress,
    SealedDelta,
    StoredMessage,
    Tail,
)
from resources.formats.boundaries import latest
from resources.codecs.cdc import Record, TableSchema
from resources.formats import STREAM_FORMATS, stream_format
from resources.formats.spec import Decode
from resources.errors import BadMessage, DecodeError, DeltaportError, Location
from resources.kafka.read_plan import plan_ranges
from resources.kafka.scan import RawMessage, scan, topic_ranges

FORMATS = STREAM_FORMATS  # the registered formats (resources/formats/)
BATCH = 1000  # marks per ledger transaction while scanning


class SealingError(DeltaportError):
    """The topic cannot be sealed as it is (see the message)."""


@dataclass(frozen=True)
class SealPolicy:
    """How deltas of one source are cut (rules in the module docstring)."""

    format: str
    max_rows: int = 100_000
    max_seconds: float = 300.0
    lateness_seconds: float = 60.0  # Datastream: how late an event may arrive
    seal_idle_after_seconds: float | None = None  # seal the tail when nothing arrived for this long

    def __post_init__(self) -> None:
        stream_format(self.format)  # an unknown format: UnknownFormatError (a ValueError)
        if self.max_rows < 1 or self.max_seconds <= 0 or self.lateness_seconds < 0:
            raise ValueError("max_rows and max_seconds must be positive, lateness_seconds not negative")
        if self.seal_idle_after_seconds is not None and self.seal_idle_after_seconds < 0:
            raise ValueError("seal_idle_after_seconds must not be negative")


@dataclass
class SealResult:
    source: str
    topic: str
    new_deltas: list[SealedDelta] = field(default_factory=list)
    read: int = 0
    quarantined: Counter = field(default_factory=Counter)
    waiting_reason: str | None = None  # why the tail is not sealed (yet)
    remaining: int = 0  # messages left after this call's budget
    warnings: list[str] = field(default_factory=list)  # deltas cut past a limit, and why
    errors: list[str] = field(default_factory=list)  # the first few bad messages, with location
    marks: dict[int, tuple[int, int]] = field(default_factory=dict)  # {partition: (low, high)} as read


# ---------------------------------------------------------------------------------------------
# Decoders
# ---------------------------------------------------------------------------------------------

def make_decoder(format: str, metadata: Iterable[StoredMessage] = ()) -> Decode:
    """A decode(key, value) function for `format`, primed with `metadata` (in order) when the
    format keeps metadata messages (Qlik). A null value (tombstone) gives what the format says
    of it (no record for most)."""
    return stream_format(format).decoder(metadata)


def delta_decoder(ledger: CdcLedger, source: str, format: str, delta_num: int) -> Decode:
    """A decoder ready to read delta `delta_num` from its first message (Qlik: primed with the
    metadata messages before it, kept by the ledger even when retention deleted them)."""
    keeps = stream_format(format).keeps_metadata
    return make_decoder(format, ledger.metadata_messages(source, upto=delta_num) if keeps else ())


def read_delta(bootstrap: str, ledger: CdcLedger, source: str, delta_num: int, format: str, *,
               consumer_config: Mapping[str, object] | None = None,
               timeout: float = 30.0) -> Iterator[tuple[RawMessage, list[Record] | DecodeError]]:
    """The messages of a sealed delta still in Kafka, partition by partition in offset order,
    each with its records or its (located) decode error."""
    delta = ledger.delta(source, delta_num)
    decode = delta_decoder(ledger, source, format, delta_num)
    # Retention may have deleted the start (or all) of a range: read only what is left, so a
    # gone range is not waited for past its end.
    low = {p: lo for p, (lo, _) in topic_ranges(bootstrap, delta.topic, config=consumer_config,
                                                 timeout=timeout).items()}
    ranges = {p: (max(s, low.get(p, s)), e) for p, (s, e) in delta.ranges.items() if e > max(s, low.get(p, s))}
    for msg in scan(bootstrap, delta.topic, ranges, config=consumer_config, timeout=timeout):
        try:
            yield msg, decode(msg.key, msg.value)
        except DecodeError as err:
            yield msg, err.located(Location(delta.topic, msg.partition, msg.offset))


# ---------------------------------------------------------------------------------------------
# The cut
# ---------------------------------------------------------------------------------------------

_LOWEST = -(1 << 62)


@dataclass(frozen=True)
class Cut:
    ends: dict[int, int]  # partition -> end offset (exclusive); absent: empty range
    watermark_us: int | None
    reason: str  # "rows", "time" or "idle"
    warning: str | None = None


def plan_cut(tail: Tail, policy: SealPolicy, *, flush: bool = False) -> tuple[Cut | None, str | None]:
    """The next delta to seal from `tail`, or (None, why not). Pure (rules: module docstring)."""
    seq = sorted((m for ms in tail.marks.values() for m in ms),
                 key=lambda m: (_LOWEST if m.watermark_us is None else m.watermark_us, m.partition, m.offset))
    if not seq:
        return None, None
    # Spans are measured in watermarks, from the previous delta's (or the tail's first one).
    first = next((m.watermark_us for m in seq if m.watermark_us is not None), None)
    start = tail.previous_watermark_us if tail.previous_watermark_us is not None else first
    max_us = int(policy.max_seconds * 1_000_000)
    rows, exceeded, over = 0, None, None
    for i, m in enumerate(seq):
        rows += m.rows
        if rows > policy.max_rows:
            exceeded, over = i, "rows"
            break
        if start is not None and m.watermark_us is not None and m.watermark_us - start > max_us:
            exceeded, over = i, "time"
            break
    span = 0.0 if start is None or seq[-1].watermark_us is None else (seq[-1].watermark_us - start) / 1e6
    if exceeded is None:
        if flush:
            last = [i for i, m in enumerate(seq) if m.kind in (HARD, SOFT)]
            if last:
                return _cut(seq, last[-1], (HARD, SOFT), "idle", tail.previous_watermark_us), None
            return None, f"{len(seq)} messages since the last boundary, none ends a transaction or carries a watermark"
        return None, (f"limits not reached: {rows} rows (max {policy.max_rows}), {span:.1f} s of event time "
                      f"(max {policy.max_seconds:g} s) in {len(seq)} unsealed messages")
    allowed = (HARD, SOFT) if over == "rows" else (HARD,)
    before = [i for i in range(exceeded) if seq[i].kind in allowed]
    if before:
        return _cut(seq, before[-1], allowed, over, tail.previous_watermark_us), None
    after = [i for i in range(exceeded, len(seq)) if seq[i].kind in allowed]
    what = (f"a transaction (or full-load run) longer than max_rows={policy.max_rows}" if over == "rows"
            else f"no watermark within max_seconds={policy.max_seconds:g}")
    if after:
        k = after[0]
        n = sum(m.rows for m in seq[:k + 1])
        return _cut(seq, k, allowed, over, tail.previous_watermark_us,
                    f"{what}: cut at its first boundary ({n} rows), never inside it"), None
    return None, f"{what}: {rows} rows so far; the cut waits for the boundary that ends it"


def _cut(seq: list[Mark], k: int, allowed: tuple[str, ...], reason: str, previous_us: int | None,
         warning: str | None = None) -> Cut:
    ends: dict[int, int] = {}
    for m in seq[:k + 1]:
        if m.kind in allowed:
            ends[m.partition] = max(ends.get(m.partition, 0), m.offset + 1)
    # A source's watermark never goes back (a lagging partition may offer an older one).
    return Cut(ends, latest(previous_us, seq[k].watermark_us), reason, warning)


# ---------------------------------------------------------------------------------------------
# Kafka -> ledger -> sealed deltas
# ---------------------------------------------------------------------------------------------


def seal_topic(bootstrap: str, topic: str, source: str, ledger: CdcLedger, policy: SealPolicy, *,
               max_messages: int = 5000, consumer_config: Mapping[str, object] | None = None,
               timeout: float = 30.0, now_ms: int | None = None) -> SealResult:
    """Scan up to `max_messages` new messages of `topic` for `source`, then seal every delta the
    rules allow. `now_ms` (default: the clock) is compared with Kafka timestamps for the idle flush."""
    result = SealResult(source, topic)
    ledger.register(source, topic, policy.format)
    marks = result.marks = topic_ranges(bootstrap, topic, config=consumer_config, timeout=timeout)
    progress = ledger.progress(source)
    behind = {p: (pr.next_offset, marks[p][1]) for p, pr in progress.items()
              if p in marks and pr.next_offset > marks[p][1]}
    if behind:
        detail = ", ".join(f"partition {p}: scanned up to {o}, topic ends at {hi}" for p, (o, hi) in behind.items())
        raise SealingError(f"topic {topic!r} is shorter than what the ledger {ledger.where} has scanned for source "
                           f"{source!r} ({detail}): was it re-created? Its sealed deltas would name other messages")
    # A partition seen for the first time: its first delta starts at its low watermark.
    fresh = {p: PartitionProgress(lo, lo) for p, (lo, _) in marks.items() if p not in progress}
    progress.update(fresh)
    ranges, result.remaining = plan_ranges(marks, {p: pr.next_offset for p, pr in progress.items()}, max_messages)

    fmt = stream_format(policy.format)
    observe = fmt.observe
    decode = make_decoder(policy.format, ledger.metadata_messages(source) if fmt.keeps_metadata else ())
    states = {p: dict(pr.state) for p, pr in progress.items()}
    last_ts = {p: pr.last_ts_ms for p, pr in progress.items()}
    batch_marks: list[Mark] = []
    batch_meta: list[StoredMessage] = []
    batch_bad: list[BadMessage] = []
    reached: dict[int, int] = {p: pr.next_offset for p, pr in fresh.items()}

    def flush() -> None:
        if not reached:
            return
        moved = {p: PartitionProgress(o, progress[p].sealed_to, last_ts.get(p), states.get(p, {}))
                 for p, o in reached.items()}
        ledger.append(source, topic, marks=batch_marks, metadata=batch_meta, bad=batch_bad, progress=moved)
        for b in (batch_marks, batch_meta, batch_bad):
            b.clear()
        reached.clear()

    for msg in scan(bootstrap, topic, ranges, config=consumer_config, timeout=timeout):
        result.read += 1
        p = msg.partition
        try:
            records: list[Record] | None = decode(msg.key, msg.value)
        except DecodeError as err:
            batch_bad.append(BadMessage.of(err.located(Location(topic, p, msg.offset))))
            result.quarantined[err.kind] += 1
            if len(result.errors) < 20:
                result.errors.append(str(err))
            records = None
        kind, et, wm, rows = observe(records, states.setdefault(p, {}), policy)
        if fmt.keeps_metadata and records and any(isinstance(r, TableSchema) for r in records):
            batch_meta.append(StoredMessage(topic, p, msg.offset, msg.key, msg.value or b""))
        batch_marks.append(Mark(p, msg.offset, kind, et, wm, rows, msg.timestamp_ms))
        reached[p] = msg.offset + 1
        last_ts[p] = msg.timestamp_ms
        if result.read % BATCH == 0:
            flush()
    # Ranges that ended on offsets with no message (compaction, transaction markers) still count.
    for p, (_, hi) in ranges.items():
        reached[p] = max(reached.get(p, 0), hi)
    flush()

    now = time.time() * 1000 if now_ms is None else now_ms
    newest = max((t for t in last_ts.values() if t is not None), default=None)
    idle = (policy.seal_idle_after_seconds is not None and result.remaining == 0 and newest is not None
            and now - newest >= policy.seal_idle_after_seconds * 1000)
    while True:
        tail = ledger.tail(source)
        cut, why = plan_cut(tail, policy, flush=idle)
        if cut is None:
            result.waiting_reason = why
            break
        try:
            delta = ledger.seal(source, tail.next_delta, cut.ends, watermark_us=cut.watermark_us,
                                starts={p: pr.sealed_to for p, pr in tail.progress.items()}, reason=cut.reason)
        except LedgerConflict:
            continue  # another sealer (the daemon, a `sync`, another host) sealed it first: re-read
        result.new_deltas.append(delta)
        if cut.warning:
            result.warnings.append(f"delta {delta.delta_num} of {source!r}: {cut.warning}")
    return result
