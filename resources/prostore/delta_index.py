"""The delta index: where every delta's messages are, durable across restarts and retention.

What flows in: decoded keys of backup messages and decoded signal events, with their Kafka
coordinates, one batch per call, together with the offsets the batch reaches. What flows out:
per (datamart, delta) the state of the delta in the signal topic (open, cancelled, closed), the
completeness of its backup increments, the exact offsets of the chosen increment's messages
(so reading a delta costs O(delta), not O(topic)), the delta's signal events, the
quarantine of bad messages, and what each backup value holds besides its rows (a writer schema,
a changelog's DDL records: stored once per distinct content), against which a delta's chunks are
checked before it is due (resources/prostore/chunk_check.py; a chunk quarantined then is a hole).

Guarantees:
- A batch and the offsets it reaches commit in one transaction: after a crash the index
  holds either the whole batch or none of it, and ingestion resumes where it had committed.
- Re-ingesting a message (same topic, partition, offset) changes nothing, and a signal event
  seen again under the same eventLogId (at-least-once delivery) is kept once.
- WRITE_* and schema events are attributed to the delta open in their datamart when they arrive
  (`delta_num`, and `attempt`, which counts the DELTA_OPENs of a delta number that was cancelled
  and opened again); events outside any delta record the last closed delta (`after_delta`).

The tables live in a state store (`resources.state.store`): a SQLite file for one machine, or
PostgreSQL, where sensors and `sync` on several hosts write under one lock and never index a
message twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from resources.errors import BadMessage
from resources.state.store import Connection, StoreTables
from resources.codecs.backup import BackupKey
from resources.codecs.signal import DeltaCancel, DeltaClose, DeltaOpen, SignalEvent
from resources.prostore.completeness import DeltaReport, IncrementLedger

_SCHEMA = """
CREATE TABLE IF NOT EXISTS progress (
  topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
  PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS backup_messages (
  topic TEXT NOT NULL, partition INTEGER NOT NULL, "offset" INTEGER NOT NULL, timestamp_ms INTEGER,
  datamart TEXT NOT NULL, delta_num INTEGER NOT NULL, increment_id TEXT NOT NULL,
  message_type INTEGER NOT NULL, table_name TEXT, stream_number INTEGER, stream_total INTEGER,
  chunk_number INTEGER, is_last_chunk INTEGER, delta_date INTEGER, value_bytes INTEGER,
  PRIMARY KEY (topic, partition, "offset"));
CREATE INDEX IF NOT EXISTS backup_by_delta ON backup_messages (datamart, delta_num);
CREATE TABLE IF NOT EXISTS signal_events (
  topic TEXT NOT NULL, partition INTEGER NOT NULL, "offset" INTEGER NOT NULL,
  datamart TEXT NOT NULL, event_log_id TEXT NOT NULL, code TEXT NOT NULL, event_time TEXT,
  delta_num INTEGER, attempt INTEGER, after_delta INTEGER, key BLOB, value BLOB,
  PRIMARY KEY (topic, partition, "offset"), UNIQUE (datamart, event_log_id));
CREATE INDEX IF NOT EXISTS signal_by_delta ON signal_events (datamart, delta_num);
CREATE TABLE IF NOT EXISTS deltas (
  datamart TEXT NOT NULL, delta_num INTEGER NOT NULL, status TEXT NOT NULL, delta_date TEXT,
  attempts INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (datamart, delta_num));
CREATE TABLE IF NOT EXISTS open_delta (datamart TEXT PRIMARY KEY, delta_num INTEGER);
CREATE TABLE IF NOT EXISTS quarantine (
  topic TEXT NOT NULL, partition INTEGER NOT NULL, "offset" INTEGER NOT NULL, part TEXT,
  kind TEXT NOT NULL, reason TEXT NOT NULL, PRIMARY KEY (topic, partition, "offset"));
"""
# Version 2: what each backup value holds besides its rows, kept once per distinct content: a
# data message's writer schema, a changelog message's DDL records (`value_schemas`, by hash), so a
# delta's chunks can be checked against its changelog before it is due (prostore/chunk_check.py).
# Messages indexed before it have no schema_hash and are not checked.
_SCHEMAS = """
ALTER TABLE backup_messages ADD COLUMN schema_hash TEXT;
CREATE TABLE IF NOT EXISTS value_schemas (hash TEXT PRIMARY KEY, body TEXT NOT NULL);
"""
# Version 3: when a delta's DELTA_CLOSE arrived in Kafka (its message's timestamp, epoch ms), so
# lag is measured from when the delta became available, not from its business date
# (platform_assets/lag.py). Deltas closed before it have none: their lag counts from deltaDate.
_CLOSE_TIMES = "ALTER TABLE deltas ADD COLUMN closed_ms INTEGER;"
# Version 4: the delta of a quarantined backup message whose key decoded (its value did not), so a
# delta's increment counts and names its bad messages (platform_assets/prostore/checks.py). Messages
# quarantined before it, and those whose key is unreadable, have none.
_QUARANTINE_DELTAS = """
ALTER TABLE quarantine ADD COLUMN datamart TEXT;
ALTER TABLE quarantine ADD COLUMN delta_num INTEGER;
"""
# Version i+1 of the tables is _MIGRATIONS[i] applied to version i (never edit a shipped one).
_MIGRATIONS = (_SCHEMA, _SCHEMAS, _CLOSE_TIMES, _QUARANTINE_DELTAS)

OPEN, CLOSED, CANCELLED = "open", "closed", "cancelled"


def schema_hash(body: str) -> str:
    """The key of a stored schema: the same content, one row, whatever message carries it."""
    return hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


def changelog_body(records: Iterable) -> str:
    """A changelog value's records (`backup.ChangelogRecord`) as stored in `value_schemas`."""
    return json.dumps([[r.change_num, r.entity_name, r.change_query] for r in records], ensure_ascii=False)


@dataclass(frozen=True)
class BackupEntry:
    partition: int
    offset: int
    timestamp_ms: int
    key: BackupKey
    value_bytes: int
    # A data value's writer schema (JSON), a changelog value's records (`changelog_body`).
    schema: str | None = None


@dataclass(frozen=True)
class SignalEntry:
    partition: int
    offset: int
    event: SignalEvent
    key: bytes
    value: bytes | None
    timestamp_ms: int | None = None  # the message's Kafka time: when a DELTA_CLOSE made its delta available


@dataclass(frozen=True)
class BatchResult:
    backup_added: int
    signal_added: int
    signal_duplicates: int
    quarantined: int


@dataclass(frozen=True)
class MessageRef:
    """One message of a chosen increment: where to fetch it."""

    partition: int
    offset: int
    table_name: str | None
    message_type: int
    stream_number: int
    chunk_number: int
    value_bytes: int = 0


class DeltaIndex(StoreTables):
    COMPONENT, MIGRATIONS = "delta_index", _MIGRATIONS

    def _transaction(self):
        # One writer at a time: signal events are attributed to the delta open when they are added.
        return self.store.transaction("delta_index")

    # --- ingestion ------------------------------------------------------------------------
    def progress(self, topic: str) -> dict[int, int]:
        """{partition: next offset to read} for `topic`, as far as the index has committed."""
        with self._connect() as db:
            rows = db.execute("SELECT partition, next_offset FROM progress WHERE topic = ?", (topic,))
            return {p: o for p, o in rows}

    def write_batch(self, topic: str, *, backup: Iterable[BackupEntry] = (), signal: Iterable[SignalEntry] = (),
                    bad: Iterable[BadMessage] = (), next_offsets: dict[int, int]) -> BatchResult:
        """Add one batch read from `topic` and move its progress, atomically."""
        b_added = s_added = s_dups = q = 0
        with self._transaction() as db:
            stored: set[str] = set()
            for e in backup:
                k = e.key
                digest = None if e.schema is None else schema_hash(e.schema)
                if digest is not None and digest not in stored:
                    db.execute("INSERT INTO value_schemas VALUES (?, ?) ON CONFLICT DO NOTHING", (digest, e.schema))
                    stored.add(digest)
                cur = db.execute(
                    'INSERT INTO backup_messages (topic, partition, "offset", timestamp_ms, datamart, delta_num, '
                    "increment_id, message_type, table_name, stream_number, stream_total, chunk_number, "
                    "is_last_chunk, delta_date, value_bytes, schema_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
                    "ON CONFLICT DO NOTHING",
                    (topic, e.partition, e.offset, e.timestamp_ms, k.datamart, k.delta_num, k.increment_id,
                     k.message_type, k.table_name, k.stream_number, k.stream_total, k.chunk_number,
                     int(k.is_last_chunk), k.delta_date, e.value_bytes, digest))
                b_added += cur.rowcount
            for e in signal:
                added = self._add_signal(db, topic, e)
                s_added += added
                s_dups += 1 - added
            for e in bad:
                cur = db.execute('INSERT INTO quarantine (topic, partition, "offset", part, kind, reason, datamart, '
                                 'delta_num) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING',
                                 (topic, e.partition, e.offset, e.part, e.kind, e.reason, e.datamart, e.delta_num))
                q += cur.rowcount
            for partition, offset in next_offsets.items():
                db.execute("INSERT INTO progress VALUES (?,?,?) ON CONFLICT (topic, partition) DO UPDATE "
                           "SET next_offset = excluded.next_offset WHERE excluded.next_offset > progress.next_offset",
                           (topic, partition, offset))
        return BatchResult(b_added, s_added, s_dups, q)

    def _add_signal(self, db: Connection, topic: str, e: SignalEntry) -> int:
        ev = e.event
        dm = ev.datamart
        seen = db.execute('SELECT 1 FROM signal_events WHERE (topic = ? AND partition = ? AND "offset" = ?) '
                          "OR (datamart = ? AND event_log_id = ?)",
                          (topic, e.partition, e.offset, dm, ev.event_log_id)).fetchone()
        if seen:
            return 0
        row = db.execute("SELECT delta_num FROM open_delta WHERE datamart = ?", (dm,)).fetchone()
        open_num = row[0] if row else None
        v = ev.value
        delta = open_num
        if isinstance(v, (DeltaOpen, DeltaClose, DeltaCancel)):
            delta = v.delta_num
        if isinstance(v, DeltaOpen):
            db.execute("INSERT INTO deltas (datamart, delta_num, status, attempts) VALUES (?,?,?,1) "
                       "ON CONFLICT (datamart, delta_num) DO UPDATE SET attempts = deltas.attempts + 1, "
                       "status = CASE WHEN deltas.status = 'closed' THEN deltas.status ELSE 'open' END", (dm, delta, OPEN))
            db.execute("INSERT INTO open_delta VALUES (?, ?) ON CONFLICT (datamart) DO UPDATE "
                       "SET delta_num = excluded.delta_num", (dm, delta))
        elif isinstance(v, DeltaClose):
            # The first close's Kafka time is kept: a close sent again does not make the delta younger.
            db.execute("INSERT INTO deltas (datamart, delta_num, status, delta_date, attempts, closed_ms) "
                       "VALUES (?,?,?,?,1,?) ON CONFLICT (datamart, delta_num) DO UPDATE SET status = 'closed', "
                       "delta_date = excluded.delta_date, closed_ms = coalesce(deltas.closed_ms, excluded.closed_ms)",
                       (dm, delta, CLOSED, v.delta_date.isoformat(), e.timestamp_ms))
            db.execute("DELETE FROM open_delta WHERE datamart = ?", (dm,))
        elif isinstance(v, DeltaCancel):
            db.execute("INSERT INTO deltas (datamart, delta_num, status, attempts) VALUES (?,?,?,1) "
                       "ON CONFLICT (datamart, delta_num) DO UPDATE "
                       "SET status = CASE WHEN deltas.status = 'closed' THEN deltas.status ELSE 'cancelled' END",
                       (dm, delta, CANCELLED))
            db.execute("DELETE FROM open_delta WHERE datamart = ?", (dm,))
        attempt = None
        if delta is not None:
            got = db.execute("SELECT attempts FROM deltas WHERE datamart = ? AND delta_num = ?", (dm, delta)).fetchone()
            attempt = got[0] if got else None
        if delta is None:
            after = db.execute("SELECT max(delta_num) FROM deltas WHERE datamart = ? AND status = 'closed'",
                               (dm,)).fetchone()[0]
        else:
            after = db.execute("SELECT max(delta_num) FROM deltas WHERE datamart = ? AND status = 'closed' "
                               "AND delta_num < ?", (dm, delta)).fetchone()[0]
        db.execute('INSERT INTO signal_events VALUES (?,?,?,?,?,?,?,?,?,?,?,?)',
                   (topic, e.partition, e.offset, dm, ev.event_log_id, ev.key.event,
                    ev.key.datetime.isoformat(), delta, attempt, after, e.key, e.value))
        return 1

    # --- queries --------------------------------------------------------------------------
    def deltas(self, datamart: str, status: str | None = None, start: int = 0) -> dict[int, dict]:
        """{delta: {"status", "delta_date", "attempts", "closed_ms"}} as the signal topic tells it, of
        the deltas from `start` on (a sensor tick asks from its cursor: O(deltas waiting), not
        O(lake age)). `closed_ms`: the Kafka time of its DELTA_CLOSE, None if not closed or indexed
        before the index kept it."""
        with self._connect() as db:
            rows = db.execute("SELECT delta_num, status, delta_date, attempts, closed_ms FROM deltas WHERE datamart = ? "
                              "AND status = coalesce(?, status) AND delta_num >= ? ORDER BY delta_num",
                              (datamart, status, start))
            return {n: {"status": s, "delta_date": d, "attempts": a, "closed_ms": c} for n, s, d, a, c in rows}

    def delta_report(self, topic: str, datamart: str, delta_num: int) -> DeltaReport | None:
        """Completeness of `delta_num`'s increments in the backup topic (None: nothing seen)."""
        ledger = IncrementLedger()
        for key, partition, offset, ts, _ in self._keys(topic, datamart, delta_num):
            ledger.add(key, partition, offset, ts)
        return ledger.delta_report(datamart, delta_num)

    def backup_deltas(self, topic: str, datamart: str, start: int = 0) -> list[int]:
        """The deltas from `start` on that have a message in the backup topic."""
        with self._connect() as db:
            rows = db.execute("SELECT DISTINCT delta_num FROM backup_messages WHERE topic = ? AND datamart = ? "
                              "AND delta_num >= ? ORDER BY delta_num", (topic, datamart, start))
            return [r[0] for r in rows]

    def backup_delta_arrivals(self, topic: str, datamart: str, after: int | None = None) -> dict[int, int | None]:
        """{delta: the Kafka time of its first message in the backup topic (epoch ms)} of the
        deltas after `after`: when a backup-only datamart's delta began to be available."""
        with self._connect() as db:
            rows = db.execute("SELECT delta_num, MIN(timestamp_ms) FROM backup_messages WHERE topic = ? AND datamart = ? "
                              "AND delta_num > ? GROUP BY delta_num ORDER BY delta_num",
                              (topic, datamart, -1 if after is None else after))
            return {n: d for n, d in rows}

    def export_runs(self, topic: str, datamart: str) -> dict[int, list[str]]:
        """{delta: the incrementIds (export runs) seen for it in the topic}, in one query."""
        with self._connect() as db:
            rows = db.execute("SELECT DISTINCT delta_num, increment_id FROM backup_messages WHERE topic = ? "
                              "AND datamart = ? ORDER BY delta_num, increment_id", (topic, datamart))
            out: dict[int, list[str]] = {}
            for n, inc in rows:
                out.setdefault(n, []).append(inc)
            return out

    def _keys(self, topic: str, datamart: str, delta_num: int):
        # A message quarantined after it was indexed (a chunk its changelog refuses) is a hole,
        # as a corrupt copy is: it counts for nothing and is never read.
        with self._connect() as db:
            rows = db.execute(
                'SELECT partition, "offset", timestamp_ms, increment_id, message_type, table_name, stream_number, '
                "stream_total, chunk_number, is_last_chunk, delta_date, value_bytes FROM backup_messages b "
                "WHERE topic = ? AND datamart = ? AND delta_num = ? AND NOT EXISTS (SELECT 1 FROM quarantine q "
                'WHERE q.topic = b.topic AND q.partition = b.partition AND q."offset" = b."offset") '
                'ORDER BY partition, "offset"',
                (topic, datamart, delta_num)).fetchall()
        for p, o, ts, inc, mt, table, sn, st, cn, last, date, size in rows:
            yield BackupKey(inc, mt, datamart, delta_num, date, table, sn, st, cn, bool(last)), p, o, ts, size

    def chosen_messages(self, topic: str, datamart: str, delta_num: int) -> tuple[DeltaReport, list[MessageRef]]:
        """The chosen increment of a delta and one copy of each of its messages (the first)."""
        report = self.delta_report(topic, datamart, delta_num)
        if report is None or report.chosen is None:
            return report, []
        seen: set = set()
        refs = []
        for key, p, o, _, size in self._keys(topic, datamart, delta_num):
            ident = (key.message_type, key.table_name, key.stream_number, key.chunk_number, key.is_last_chunk)
            if key.increment_id != report.chosen or ident in seen:
                continue
            seen.add(ident)
            refs.append(MessageRef(p, o, key.table_name, key.message_type, key.stream_number, key.chunk_number, size))
        return report, refs

    def increment_schemas(self, topic: str, datamart: str, delta_num: int,
                          increment_id: str) -> list[tuple[int, int, int, str | None, str | None]]:
        """(partition, offset, message type, table, schema hash) of every message of one export
        run of a delta that is not quarantined, duplicates included, in topic order."""
        with self._connect() as db:
            return db.execute(
                'SELECT partition, "offset", message_type, table_name, schema_hash FROM backup_messages b '
                "WHERE topic = ? AND datamart = ? AND delta_num = ? AND increment_id = ? AND NOT EXISTS "
                '(SELECT 1 FROM quarantine q WHERE q.topic = b.topic AND q.partition = b.partition AND '
                'q."offset" = b."offset") ORDER BY partition, "offset"',
                (topic, datamart, delta_num, increment_id)).fetchall()

    def schema_bodies(self, hashes: Iterable[str]) -> dict[str, str]:
        """{hash: body} of the stored schemas (`BackupEntry.schema`) with these hashes."""
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        with self._connect() as db:
            rows = db.execute(f"SELECT hash, body FROM value_schemas WHERE hash IN ({','.join('?' * len(wanted))})",
                              wanted).fetchall()
        return dict(rows)

    def quarantined_chunks(self, topic: str, datamart: str, delta_num: int) -> list[dict]:
        """The delta's messages quarantined after they were indexed (a chunk its changelog refuses)."""
        with self._connect() as db:
            rows = db.execute(
                'SELECT q.partition, q."offset", q.kind, q.reason, b.increment_id FROM quarantine q JOIN '
                'backup_messages b ON b.topic = q.topic AND b.partition = q.partition AND b."offset" = q."offset" '
                'WHERE b.topic = ? AND b.datamart = ? AND b.delta_num = ? ORDER BY q.partition, q."offset"',
                (topic, datamart, delta_num)).fetchall()
        return [dict(zip(("partition", "offset", "kind", "reason", "increment_id"), r)) for r in rows]

    def delta_quarantine(self, topic: str, datamart: str, first: int, last: int) -> dict[int, list[dict]]:
        """{delta: its quarantined backup messages [{partition, offset, part, kind, reason}]} of the
        deltas first..last that have any: a copy whose key named the delta but whose value was bad,
        and a chunk quarantined after it was indexed. O(the topic's quarantine), a small table."""
        with self._connect() as db:
            rows = db.execute(
                'SELECT coalesce(q.delta_num, b.delta_num), q.partition, q."offset", q.part, q.kind, q.reason '
                'FROM quarantine q LEFT JOIN backup_messages b ON b.topic = q.topic AND b.partition = q.partition '
                'AND b."offset" = q."offset" WHERE q.topic = ? AND coalesce(q.datamart, b.datamart) = ? '
                'AND coalesce(q.delta_num, b.delta_num) BETWEEN ? AND ? ORDER BY 1, q.partition, q."offset"',
                (topic, datamart, first, last)).fetchall()
        out: dict[int, list[dict]] = {}
        for n, *rest in rows:
            out.setdefault(n, []).append(dict(zip(("partition", "offset", "part", "kind", "reason"), rest)))
        return out

    def signal_events(self, datamart: str, delta_num: int) -> list[dict]:
        """The delta's events in arrival order (all attempts), as stored."""
        with self._connect() as db:
            rows = db.execute(
                'SELECT topic, partition, "offset", event_log_id, code, event_time, delta_num, attempt, key, value '
                'FROM signal_events WHERE datamart = ? AND delta_num = ? ORDER BY partition, "offset"',
                (datamart, delta_num)).fetchall()
        cols = ("topic", "partition", "offset", "event_log_id", "code", "event_time", "delta_num", "attempt", "key", "value")
        return [dict(zip(cols, r)) for r in rows]

    def writes_for_increment(self, datamart: str, delta_num: int) -> dict[str, int] | None:
        """rowsAffected per entity of the WRITE_OKs whose rows are in increment `delta_num`:
        those of the delta's last attempt, and those outside any delta after the previous close.
        None when the signal topic has no WRITE_OK for it (the events may be switched off)."""
        with self._connect() as db:
            final = db.execute("SELECT attempts FROM deltas WHERE datamart = ? AND delta_num = ?",
                               (datamart, delta_num)).fetchone()
            prev = db.execute("SELECT max(delta_num) FROM deltas WHERE datamart = ? AND status = 'closed' "
                              "AND delta_num < ?", (datamart, delta_num)).fetchone()[0]
            rows = db.execute(
                "SELECT value FROM signal_events WHERE datamart = ? AND code = 'WRITE_OK' AND "
                "((delta_num = ? AND attempt = ?) OR (delta_num IS NULL AND coalesce(after_delta, -1) = ?))",
                (datamart, delta_num, final[0] if final else -1, -1 if prev is None else prev)).fetchall()
        if not rows:
            return None
        totals: dict[str, int] = {}
        for (value,) in rows:
            body = json.loads(value)
            if body.get("rowsAffected") is not None:
                totals[body["entity"]] = totals.get(body["entity"], 0) + int(body["rowsAffected"])
        return totals

    def quarantined_count(self, topic: str) -> int:
        """How many messages of `topic` are quarantined (a sensor observes it every tick)."""
        with self._connect() as db:
            return db.execute("SELECT count(*) FROM quarantine WHERE topic = ?", (topic,)).fetchone()[0]

    def quarantine(self, topic: str | None = None) -> list[dict]:
        with self._connect() as db:
            rows = db.execute('SELECT topic, partition, "offset", part, kind, reason FROM quarantine '
                              'WHERE topic = coalesce(?, topic) ORDER BY topic, partition, "offset"', (topic,)).fetchall()
        return [dict(zip(("topic", "partition", "offset", "part", "kind", "reason"), r)) for r in rows]
