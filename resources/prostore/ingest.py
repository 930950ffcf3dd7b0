"""Kafka -> delta index: read what is new in a signal or backup topic and index it.

Flow: from the index's committed progress (per partition; the low watermark for a partition
never read, or when retention removed what was next) up to at most `max_messages` new messages,
decode each message's key (backup: the Avro key, plus a structural check of the value's
container file, whose writer schema or changelog records are kept; signal: key and value), and
write them to the `DeltaIndex` in batches, each batch atomically with the offsets it reaches.

Guarantees: bounded work per call (a sensor tick stays short); progress moves only past what
was written; a bad message is quarantined with its kind, topic, partition and offset, counted,
and never stops the ones after it; re-reading after a crash is harmless (the index ignores
what it has).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from resources.codecs.arrow_rows import container_outline
from resources.codecs.backup import MESSAGE_TYPE_CHANGELOG, BackupKey, decode_backup_key, iter_changelog
from resources.codecs.signal import decode_signal
from resources.prostore.delta_index import BackupEntry, DeltaIndex, SignalEntry, changelog_body
from resources.errors import BadContainerFileError, BadMessage, DecodeError, DeltaportError, Location
from resources.failpoints import failpoint
from resources.kafka.read_plan import plan_ranges
from resources.kafka.scan import RawMessage, scan, topic_ranges

BACKUP, SIGNAL = "backup", "signal"


class IngestError(DeltaportError):
    """The topic cannot be indexed as it is (see the message)."""
BATCH = 1000


@dataclass
class IngestResult:
    topic: str
    read: int = 0
    indexed: int = 0
    duplicates: int = 0
    quarantined: Counter = field(default_factory=Counter)
    remaining: int = 0  # messages left after this call's budget
    errors: list[str] = field(default_factory=list)  # the first few, rendered with location
    marks: dict[int, tuple[int, int]] = field(default_factory=dict)  # {partition: (low, high)} as read


def ingest_topic(bootstrap: str, topic: str, index: DeltaIndex, kind: str, *, max_messages: int = 5000,
                 consumer_config: Mapping[str, object] | None = None, timeout: float = 30.0) -> IngestResult:
    """Index up to `max_messages` new messages of `topic` (`kind` is BACKUP or SIGNAL)."""
    result = IngestResult(topic)
    marks = result.marks = topic_ranges(bootstrap, topic, config=consumer_config, timeout=timeout)
    progress = index.progress(topic)
    behind = {p: (o, marks[p][1]) for p, o in progress.items() if p in marks and o > marks[p][1]}
    if behind:
        # The index has read further than the topic now reaches: the topic was deleted and made
        # again (or is another cluster's). Its offsets now mean other messages: refuse to guess.
        detail = ", ".join(f"partition {p}: indexed up to {o}, topic ends at {hi}" for p, (o, hi) in behind.items())
        raise IngestError(f"topic {topic!r} is shorter than what the delta index {index.where} has read ({detail}): "
                          "was it re-created? Point state_dir at a new folder to index it from scratch")
    ranges, result.remaining = plan_ranges(marks, progress, max_messages)
    batch: dict[str, list] = {"backup": [], "signal": [], "bad": []}
    reached: dict[int, int] = {}

    def flush() -> None:
        if not reached:
            return
        res = index.write_batch(topic, backup=batch["backup"], signal=batch["signal"], bad=batch["bad"],
                                next_offsets=dict(reached))
        result.indexed += res.backup_added + res.signal_added
        result.duplicates += res.signal_duplicates
        for v in batch.values():
            v.clear()
        reached.clear()

    for msg in scan(bootstrap, topic, ranges, config=consumer_config, timeout=timeout):
        result.read += 1
        failpoint("ingest.read")
        key = None
        try:
            if kind == BACKUP:
                key = _backup_key(msg)
                batch[kind].append(_backup_entry(msg, key))
            else:
                batch[kind].append(_signal_entry(msg))
        except DecodeError as err:
            # A bad value under a good key is kept with the delta it names: that delta's
            # increment counts and names it (platform_assets/prostore/checks.py).
            batch["bad"].append(BadMessage.of(err.located(Location(topic, msg.partition, msg.offset)),
                                              datamart=key.datamart if key else None,
                                              delta_num=key.delta_num if key else None))
            result.quarantined[err.kind] += 1
            if len(result.errors) < 20:
                result.errors.append(str(err))
        reached[msg.partition] = msg.offset + 1
        if result.read % BATCH == 0:
            flush()
    # Partitions whose range held only offsets that no longer exist (compaction, transactions)
    # still advance, so the next call does not ask for them again.
    for p, (_, hi) in ranges.items():
        reached[p] = max(reached.get(p, 0), hi)
    flush()
    return result


def _backup_key(msg: RawMessage) -> BackupKey:
    try:
        return decode_backup_key(msg.key or b"")
    except DecodeError as err:
        err.part = "key"
        raise


def _backup_entry(msg: RawMessage, key: BackupKey | None = None) -> BackupEntry:
    key = _backup_key(msg) if key is None else key
    try:
        if key.message_type == MESSAGE_TYPE_CHANGELOG:
            schema = changelog_body(iter_changelog(msg.value or b""))  # small, and the DDL must be readable
        else:
            schema = _text(container_outline(msg.value or b"")[1])
    except DecodeError as err:
        err.part = "value"
        raise
    # What the value holds besides rows is kept, so its delta's chunks are checked against the
    # delta's own changelog before the delta is due (resources/prostore/chunk_check.py).
    return BackupEntry(msg.partition, msg.offset, msg.timestamp_ms, key, len(msg.value or b""), schema)


def _text(schema: bytes) -> str:
    try:
        return schema.decode("utf-8")
    except UnicodeDecodeError as exc:  # no reader could parse it (Avro schemas are JSON text)
        raise BadContainerFileError(f"unreadable row container header: writer schema is not UTF-8 ({exc})") from None


def _signal_entry(msg: RawMessage) -> SignalEntry:
    event = decode_signal(msg.key or b"", msg.value)
    return SignalEntry(msg.partition, msg.offset, event, msg.key or b"", msg.value, msg.timestamp_ms)
