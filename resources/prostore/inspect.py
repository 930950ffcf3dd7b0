"""What is in a Prostore topic: the answer of `RESTORE_FROM_KAFKA`'s read-only check, and more.

`TopicInspector` is fed raw messages (from `resources.kafka.scan` or anywhere) and builds a
report: for backup messages, per datamart the deltas present, complete or not and why, and the
deltas missing; for signal messages, per datamart the deltas opened, closed and cancelled and
the writes seen. Every bad message becomes a typed, located `DecodeError`, is counted by kind
and kept (the first `keep_errors`) in the report; the scan goes on.

Decisions:
- A message whose key starts with `{` or `[` is a signal message (JSON); anything else is a
  backup message (Avro). One topic may hold both only by mistake, but the report still works.
- A backup message counts towards completeness only if its value is a readable container file:
  a chunk whose only copy is corrupt is a hole, not a chunk.
- Each data message's writer schema is checked against the DDL of the same increment's
  changelog, as `sync` checks it before a delta is due (resources/prostore/chunk_check.py): one
  that does not fit the table's columns, or lacks a primary-key column, is a bad message at its
  own offset and, like a corrupt copy, a hole, not a chunk. The changelog may come after the
  data: a message waits for it (its key kept, not its value); one whose increment has no
  changelog is counted unchecked (the increment is incomplete anyway). Data of a table the
  changelog does not have is reported too, and still counted (`sync` reads only the
  changelog's tables).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from resources.codecs.backup import (
    MESSAGE_TYPE_CHANGELOG,
    BackupKey,
    decode_backup_key,
    iter_changelog,
    iter_rows,
    check_key_columns,
    check_writer_schema,
    writer_schema,
)
from resources.codecs.ddl import replay_changelog
from resources.codecs.signal import DeltaCancel, DeltaClose, DeltaOpen, UnknownEvent, WriteCancel, WriteOk, decode_signal
from resources.prostore.completeness import IncrementLedger, TopicReport
from resources.errors import DdlParseError, DecodeError, Location, SchemaMismatchError
from resources.kafka.scan import RawMessage


@dataclass
class SignalDatamart:
    """What the signal topic says about one datamart."""

    opened: set[int] = field(default_factory=set)
    closed: dict[int, str] = field(default_factory=dict)  # delta -> deltaDate (ISO)
    cancelled: set[int] = field(default_factory=set)
    writes_ok: int = 0
    writes_cancelled: int = 0
    schema_changes: int = 0
    unknown_events: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        return {
            "deltas_opened": sorted(self.opened),
            "deltas_closed": {str(k): v for k, v in sorted(self.closed.items())},
            "deltas_cancelled": sorted(self.cancelled),
            "writes_ok": self.writes_ok,
            "writes_cancelled": self.writes_cancelled,
            "schema_changes": self.schema_changes,
            "unknown_events": dict(self.unknown_events),
        }


@dataclass
class InspectReport:
    topic: str
    messages: int
    backup: TopicReport
    signal: dict[str, SignalDatamart]
    duplicates: Counter  # "signal" / "backup" -> duplicated messages seen
    errors_by_kind: Counter
    errors: list[DecodeError]
    rows: dict[tuple[str, int, str], int]  # (datamart, delta, table) -> rows in the chosen increment

    def to_dict(self) -> dict:
        rows: dict[str, dict[str, dict[str, int]]] = {}
        for (dm, delta, table), n in sorted(self.rows.items()):
            rows.setdefault(dm, {}).setdefault(str(delta), {})[table] = n
        return {
            "topic": self.topic,
            "messages": self.messages,
            "backup": self.backup.to_dict(),
            "backup_rows": rows,
            "signal": {dm: s.to_dict() for dm, s in sorted(self.signal.items())},
            "duplicates": dict(self.duplicates),
            "bad_messages": sum(self.errors_by_kind.values()),
            "bad_messages_by_kind": dict(self.errors_by_kind),
            "bad_message_samples": [
                {"kind": e.kind, "part": e.part, "topic": e.location.topic if e.location else None,
                 "partition": e.location.partition if e.location else None,
                 "offset": e.location.offset if e.location else None, "reason": e.reason}
                for e in self.errors
            ],
        }


class TopicInspector:
    """Feed it messages with `add`, then call `report()`; memory is O(keys), not O(values)."""

    def __init__(self, topic: str, *, check_values: bool = True, keep_errors: int = 100):
        self.topic = topic
        self.check_values = check_values
        self.keep_errors = keep_errors
        self.messages = 0
        self.ledger = IncrementLedger()
        self.signal: dict[str, SignalDatamart] = {}
        self.seen_event_ids: set[str] = set()
        self.duplicates: Counter = Counter()
        self.errors_by_kind: Counter = Counter()
        self.errors: list[DecodeError] = []
        # increment_id -> its changelog records (all copies are the same changelog)
        self.changelogs: dict[str, list] = {}
        # increment_id -> data messages seen before its changelog: (key, where, ts, schema, rows)
        self.pending: dict[str, list[tuple]] = {}
        # (increment_id, table, schema json) -> (why it cannot land, whether that makes a hole)
        self.verdicts: dict[tuple[str, str, str], tuple[DecodeError | None, bool]] = {}
        self.entities: dict[str, dict | None] = {}  # increment_id -> its changelog replayed
        self.texts: dict[str, str] = {}
        self.rows: dict[tuple[str, int, str, str], int] = Counter()  # (dm, delta, incr, table)

    def quarantine(self, err: DecodeError) -> None:
        self.errors_by_kind[err.kind] += 1
        if len(self.errors) < self.keep_errors:
            self.errors.append(err)

    def add(self, msg: RawMessage) -> None:
        self.messages += 1
        where = Location(msg.topic, msg.partition, msg.offset)
        key = msg.key or b""
        try:
            if key[:1] in (b"{", b"["):
                self._add_signal(key, msg.value)
            else:
                self._add_backup(msg, where)
        except DecodeError as err:
            self.quarantine(err.located(where))

    def _add_signal(self, key: bytes, value: bytes | None) -> None:
        event = decode_signal(key, value)
        if event.event_log_id in self.seen_event_ids:
            self.duplicates["signal"] += 1
            return
        self.seen_event_ids.add(event.event_log_id)
        dm = self.signal.setdefault(event.datamart, SignalDatamart())
        v = event.value
        if isinstance(v, DeltaOpen):
            dm.opened.add(v.delta_num)
        elif isinstance(v, DeltaClose):
            dm.closed[v.delta_num] = v.delta_date.isoformat()
        elif isinstance(v, DeltaCancel):
            dm.cancelled.add(v.delta_num)
        elif isinstance(v, WriteOk):
            dm.writes_ok += 1
        elif isinstance(v, WriteCancel):
            dm.writes_cancelled += 1
        elif isinstance(v, UnknownEvent):
            dm.unknown_events[v.code] += 1
        else:
            dm.schema_changes += 1

    def _add_backup(self, msg: RawMessage, where: Location) -> None:
        try:
            key = decode_backup_key(msg.key or b"")
        except DecodeError as err:
            raise err.located(where, "key")
        if not self.check_values:
            self._count(key, msg.partition, msg.offset, msg.timestamp_ms, 0)
            return
        try:
            rows, schema = self._check_value(key, msg.value or b"")
        except DecodeError as err:
            raise err.located(where, "value")
        if key.message_type == MESSAGE_TYPE_CHANGELOG:
            self._count(key, msg.partition, msg.offset, msg.timestamp_ms, rows)
            for waiting in self.pending.pop(key.increment_id, []):  # its data seen before it
                self._admit(*waiting)
        elif key.increment_id not in self.changelogs:
            self.pending.setdefault(key.increment_id, []).append((key, where, msg.timestamp_ms, schema, rows))
        else:
            self._admit(key, where, msg.timestamp_ms, schema, rows)

    def _count(self, key: BackupKey, partition: int, offset: int, timestamp_ms: int, rows: int) -> None:
        if not self.ledger.add(key, partition, offset, timestamp_ms):
            self.duplicates["backup"] += 1
        elif self.check_values and key.table_name is not None:
            self.rows[(key.datamart, key.delta_num, key.increment_id, key.table_name)] += rows

    def _check_value(self, key: BackupKey, value: bytes) -> tuple[int, str | None]:
        """Read the container file through; returns its record count and, for data, its writer
        schema (JSON)."""
        if key.message_type == MESSAGE_TYPE_CHANGELOG:
            records = list(iter_changelog(value))
            self.changelogs.setdefault(key.increment_id, records)
            return len(records), None
        schema = writer_schema(value)
        count = sum(1 for _ in iter_rows(value))
        text = json.dumps(schema, sort_keys=True)
        return count, self.texts.setdefault(text, text)  # one copy of each schema, however many chunks

    def _admit(self, key: BackupKey, where: Location, timestamp_ms: int, schema: str, rows: int) -> None:
        """Count a data message, unless its changelog refuses its schema (then it is a hole)."""
        err, hole = self._verdict(key.increment_id, key.table_name or "", schema)
        if err is not None:
            self.quarantine(type(err)(err.reason).located(where, "value"))
            if hole:
                return
        self._count(key, where.partition, where.offset, timestamp_ms, rows)

    def _verdict(self, increment_id: str, table: str, schema: str) -> tuple[DecodeError | None, bool]:
        ident = (increment_id, table, schema)
        if ident not in self.verdicts:
            if increment_id not in self.entities:
                try:
                    self.entities[increment_id] = replay_changelog(self.changelogs[increment_id])
                except DdlParseError:
                    self.entities[increment_id] = None  # not checkable: the run refuses the changelog itself
            entities = self.entities[increment_id]
            verdict: tuple[DecodeError | None, bool] = (None, False)
            if entities is not None and table not in entities:
                verdict = (SchemaMismatchError(f"table {table!r} is not in the changelog of increment "
                                               f"{increment_id}"), False)
            elif entities is not None:
                try:
                    check_writer_schema(json.loads(schema), entities[table].columns)
                    check_key_columns(json.loads(schema), entities[table].primary_key)
                except SchemaMismatchError as exc:
                    verdict = (exc, True)
            self.verdicts[ident] = verdict
        return self.verdicts[ident]

    def report(self) -> InspectReport:
        for waiting in [w for ws in self.pending.values() for w in ws]:
            key, where, timestamp_ms, _, rows = waiting  # no changelog: counted unchecked
            self._count(key, where.partition, where.offset, timestamp_ms, rows)
        self.pending.clear()
        backup = self.ledger.report()
        chosen = {(dm, n): d.chosen for dm, r in backup.datamarts.items() for n, d in r.deltas.items()}
        rows = {(dm, n, table): count for (dm, n, inc, table), count in self.rows.items() if chosen.get((dm, n)) == inc}
        return InspectReport(self.topic, self.messages, backup, self.signal, self.duplicates,
                             self.errors_by_kind, self.errors, rows)
