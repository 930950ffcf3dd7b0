"""`deltaport inspect --format <stream format>`: what a change-stream topic holds, read-only.

What flows through: a topic's raw messages (any partition order; each partition in offset
order) -> an `InspectReport`: per table the changes it carries (upserts, deletes, before images),
the transactions begun, ended and rolled back, heartbeats, schema changes, tombstones, the event
times seen, and every message that does not decode, by kind, the first few located (topic,
partition, offset) as the sealer would quarantine them. The format's own decoder reads them
(resources/formats/: the same one the sealer uses, primed the same way: a Qlik decoder reads
the topic's metadata messages as it meets them), so a message this report calls bad is one the
sealer quarantines.

Guarantees: nothing is written anywhere (no ledger, no offsets committed); memory is bounded by
the tables and error kinds seen, not by the topic (`MAX_ERRORS` texts kept); a bad message never
stops the report: it is counted and the next one is read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from resources.codecs.cdc import BEFORE_IMAGE, DELETE, Change, Heartbeat, SchemaChange, TableSchema, TransactionMark
from resources.errors import DecodeError, Location
from resources.formats import stream_format
from resources.kafka.scan import RawMessage

MAX_ERRORS = 20  # located errors kept for the report; the rest are counted by kind
MAX_TABLES = 10_000  # tables counted apart; past it, in one "(other tables)" line


@dataclass
class TableCounts:
    upserts: int = 0
    deletes: int = 0
    before_images: int = 0


@dataclass
class InspectReport:
    topic: str
    format: str
    messages: int = 0
    tombstones: int = 0  # a null value (Debezium's after a delete; compaction's marker)
    tables: dict[str, TableCounts] = field(default_factory=dict)
    transactions: Counter = field(default_factory=Counter)  # begin / end / rollback
    heartbeats: int = 0
    schema_messages: int = 0  # table descriptions (Qlik metadata, a schema in the envelope)
    schema_changes: Counter = field(default_factory=Counter)  # the format's op: CREATE, ALTER, TRUNCATE...
    first_event_us: int | None = None
    last_event_us: int | None = None
    errors_by_kind: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    @property
    def bad_messages(self) -> int:
        return sum(self.errors_by_kind.values())

    def to_dict(self) -> dict:
        return {
            "topic": self.topic, "format": self.format, "messages": self.messages, "tombstones": self.tombstones,
            "tables": {t: vars(c) for t, c in sorted(self.tables.items())},
            "transactions": dict(self.transactions), "heartbeats": self.heartbeats,
            "schema_messages": self.schema_messages, "schema_changes": dict(self.schema_changes),
            "event_time_us": [self.first_event_us, self.last_event_us],
            "bad_messages": self.bad_messages, "errors_by_kind": dict(self.errors_by_kind), "errors": self.errors,
        }


class StreamInspector:
    """Feed it a topic's messages (`add`), then take its `report()`."""

    def __init__(self, topic: str, format: str):
        self._decode = stream_format(format).decoder(())  # primed by the topic's own messages, in order
        self._report = InspectReport(topic, format)

    def add(self, msg: RawMessage) -> None:
        report = self._report
        report.messages += 1
        if msg.value is None:
            report.tombstones += 1
        try:
            records = self._decode(msg.key, msg.value)
        except DecodeError as err:
            report.errors_by_kind[err.kind] += 1
            if len(report.errors) < MAX_ERRORS:
                report.errors.append(str(err.located(Location(report.topic, msg.partition, msg.offset))))
            return
        for record in records:
            self._count(record)

    def _count(self, record) -> None:
        report = self._report
        when = getattr(record, "event_time_us", None)
        if when is not None:
            report.first_event_us = when if report.first_event_us is None else min(report.first_event_us, when)
            report.last_event_us = when if report.last_event_us is None else max(report.last_event_us, when)
        if isinstance(record, Change):
            name = ".".join(p for p in (record.namespace, record.table) if p)
            if name not in report.tables and len(report.tables) >= MAX_TABLES:
                name = "(other tables)"
            counts = report.tables.setdefault(name, TableCounts())
            if record.operation == BEFORE_IMAGE:
                counts.before_images += 1
            elif record.operation == DELETE:
                counts.deletes += 1
            else:
                counts.upserts += 1
        elif isinstance(record, TransactionMark):
            report.transactions[record.kind] += 1
        elif isinstance(record, Heartbeat):
            report.heartbeats += 1
        elif isinstance(record, TableSchema):
            report.schema_messages += 1
        elif isinstance(record, SchemaChange):
            report.schema_changes[record.kind] += 1

    def report(self) -> InspectReport:
        return self._report


def render(report: InspectReport, partitions: int, seconds: float) -> str:
    """The report as the lines `deltaport inspect` prints."""
    lines = [f"topic {report.topic} ({report.format}): {report.messages} messages in {partitions} partition(s), "
             f"read in {seconds:.1f} s; {report.tombstones} tombstone(s)"]
    for name, c in sorted(report.tables.items()):
        lines.append(f"table {name}: {c.upserts} upsert(s), {c.deletes} delete(s)"
                     + (f", {c.before_images} before image(s)" if c.before_images else ""))
    if report.transactions:
        lines.append("transactions: " + ", ".join(f"{k} {v}" for k, v in sorted(report.transactions.items())))
    if report.heartbeats or report.schema_messages or report.schema_changes:
        lines.append(f"heartbeats {report.heartbeats}, table descriptions {report.schema_messages}, schema changes "
                     + (", ".join(f"{k} {v}" for k, v in sorted(report.schema_changes.items())) or "none"))
    total = report.bad_messages
    lines.append(f"bad messages: {total}" + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(
        report.errors_by_kind.items())) + ")" if total else ""))
    lines += [f"  {err}" for err in report.errors]
    return "\n".join(lines)
