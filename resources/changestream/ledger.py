"""The ledger of sealed deltas for sources with no DELTA_CLOSE (Qlik, DataWorks, Datastream).

For Prostore the source says where a delta ends; for these formats the platform decides
(`resources.changestream.sealing`), and this ledger remembers the decision for good. What flows in: per
scanned Kafka message a *mark* (its coordinates, what kind of boundary it is, its event time,
watermark and row count), the Qlik metadata messages (raw bytes), the quarantine of bad
messages, and per partition the scan progress with the format's small running state (open
transaction, last heartbeat, ...). What flows out: `sealed_deltas(source)` / `delta(source, n)`:
delta N = one offset range per partition (`{partition: (start, end_exclusive)}`), its
watermark and row count; `metadata_messages(source, upto=N)` to prime a Qlik decoder before
reading delta N (also after retention deleted those messages from Kafka); `quarantine(source)`.

Guarantees:
- A scanned batch (marks, metadata, quarantine rows) commits in one transaction with the
  progress and running state it reaches: after a crash the ledger holds all of it or none, and
  scanning resumes where it had committed. Re-adding a mark (same source, partition, offset)
  changes nothing.
- Sealing a delta is one transaction too: its ranges, the removal of its marks from the pending
  tail, and each partition's `sealed_to` move together. A seal names the delta number and the
  starts it expects; if the ledger moved meanwhile (another sealer), it raises `LedgerConflict`
  and writes nothing. So delta N is written once and always means the same offsets, after
  restarts and after retention deleted its messages from Kafka.
- Deltas tile each partition: delta N's range of partition p starts where delta N-1's ended
  (`sealed_to`), or at the low watermark seen when the partition was first scanned.

Tables are prefixed `cdc_`, so the ledger may share its store with the Prostore delta index
(`resources.prostore.delta_index`). The store (`resources.state.store`) is a SQLite file for one machine
or PostgreSQL for several hosts; writers of one source are serialized by the store's lock for
that source, so two sealers on two hosts never seal one delta twice. No Dagster, no Kafka client.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from resources.errors import BadMessage, DeltaportError
# Kinds of marks (what a cut right after a message may be used for): the boundary rules' words.
from resources.formats.boundaries import HARD, KINDS, NONE, SOFT  # re-exported
from resources.state.store import Connection, StoreTables

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cdc_sources (
  source TEXT PRIMARY KEY, topic TEXT NOT NULL, format TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cdc_progress (
  source TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
  next_offset INTEGER NOT NULL,      -- scanned up to here (exclusive)
  sealed_to INTEGER NOT NULL,        -- every offset below is in a sealed delta
  last_ts_ms INTEGER,                -- Kafka timestamp of the last message scanned
  state TEXT NOT NULL DEFAULT '{}',  -- the format's running state after next_offset - 1 (JSON)
  PRIMARY KEY (source, topic, partition));
CREATE TABLE IF NOT EXISTS cdc_marks (
  source TEXT NOT NULL, partition INTEGER NOT NULL, "offset" INTEGER NOT NULL,
  kind TEXT NOT NULL, event_time_us INTEGER, watermark_us INTEGER, rows INTEGER NOT NULL,
  ts_ms INTEGER, PRIMARY KEY (source, partition, "offset"));
CREATE TABLE IF NOT EXISTS cdc_sealed (
  source TEXT NOT NULL, delta_num INTEGER NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
  start_offset INTEGER NOT NULL, end_offset INTEGER NOT NULL, watermark_us INTEGER,
  rows INTEGER NOT NULL, sealed_at TEXT NOT NULL, reason TEXT,
  PRIMARY KEY (source, delta_num, partition));
CREATE TABLE IF NOT EXISTS cdc_metadata (
  source TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, "offset" INTEGER NOT NULL,
  key BLOB, value BLOB NOT NULL, PRIMARY KEY (source, partition, "offset"));
CREATE TABLE IF NOT EXISTS cdc_quarantine (
  source TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, "offset" INTEGER NOT NULL,
  part TEXT, kind TEXT NOT NULL, reason TEXT NOT NULL, PRIMARY KEY (source, partition, "offset"));
"""
# Version i+1 of the tables is _MIGRATIONS[i] applied to version i (never edit a shipped one).
_MIGRATIONS = (_SCHEMA,)



class LedgerError(DeltaportError):
    """The ledger cannot do what was asked (unknown delta, source bound elsewhere, ...)."""


class LedgerConflict(LedgerError):
    """The ledger moved since the caller read it (another sealer): nothing was written."""


@dataclass(frozen=True)
class Mark:
    """One scanned message of the unsealed tail."""

    partition: int
    offset: int
    kind: str
    event_time_us: int | None
    watermark_us: int | None
    rows: int
    ts_ms: int | None = None


@dataclass(frozen=True)
class StoredMessage:
    """A message kept by the ledger (Qlik metadata), with its coordinates."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


@dataclass(frozen=True)
class PartitionProgress:
    next_offset: int
    sealed_to: int
    last_ts_ms: int | None = None
    state: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SealedDelta:
    """Delta N of a source: `ranges` = {partition: (start, end exclusive)}; an empty range
    (start == end) means the partition had nothing in this delta."""

    source: str
    topic: str
    delta_num: int
    ranges: Mapping[int, tuple[int, int]]
    watermark_us: int | None
    rows: int
    sealed_at: str
    reason: str | None = None

    @property
    def messages(self) -> int:
        """Offsets in the ranges (messages, if none was compacted away)."""
        return sum(end - start for start, end in self.ranges.values())


@dataclass(frozen=True)
class Tail:
    """What is not sealed yet: the input of a sealing decision."""

    source: str
    topic: str
    next_delta: int
    previous_watermark_us: int | None  # of the last sealed delta (None: none yet, or it had none)
    progress: Mapping[int, PartitionProgress]
    marks: Mapping[int, list[Mark]]  # per partition, in offset order


class CdcLedger(StoreTables):
    COMPONENT, MIGRATIONS = "cdc_ledger", _MIGRATIONS

    def _transaction(self, source: str):
        return self.store.transaction(f"cdc_ledger:{source}")

    # --- binding --------------------------------------------------------------------------
    def register(self, source: str, topic: str, format: str) -> None:
        """Bind `source` to its topic and format on first use; a later call with another topic or
        format raises: the ledger's offsets mean messages of that one topic."""
        with self._transaction(source) as db:
            row = db.execute("SELECT topic, format FROM cdc_sources WHERE source = ?", (source,)).fetchone()
            if row is None:
                db.execute("INSERT INTO cdc_sources VALUES (?,?,?,?)", (source, topic, format, _now()))
            elif tuple(row) != (topic, format):
                raise LedgerError(f"source {source!r} is sealed from topic {row[0]!r} as {row[1]!r} in {self.where}, "
                                  f"not {topic!r} as {format!r}: use another source name or ledger file")

    # --- scanning -------------------------------------------------------------------------
    def progress(self, source: str) -> dict[int, PartitionProgress]:
        """{partition: progress} of `source`, as far as the ledger has committed."""
        with self._connect() as db:
            return self._progress(db, source)

    @staticmethod
    def _progress(db: Connection, source: str) -> dict[int, PartitionProgress]:
        rows = db.execute("SELECT partition, next_offset, sealed_to, last_ts_ms, state FROM cdc_progress "
                          "WHERE source = ? ORDER BY partition", (source,))
        return {p: PartitionProgress(n, s, ts, json.loads(st)) for p, n, s, ts, st in rows}

    def append(self, source: str, topic: str, *, marks: Iterable[Mark] = (),
               metadata: Iterable[StoredMessage] = (), bad: Iterable[BadMessage] = (),
               progress: Mapping[int, PartitionProgress]) -> int:
        """Add one scanned batch and move each partition's scan progress, atomically. A new
        partition's `sealed_to` is taken from `progress` (its low watermark); a known one's is
        never changed here. Returns the number of bad messages newly quarantined."""
        quarantined = 0
        with self._transaction(source) as db:
            # A mark below sealed_to is in a sealed delta already (another sealer, on this host or
            # another, scanned and sealed it meanwhile): adding it again would count it twice.
            sealed = {p: pr.sealed_to for p, pr in self._progress(db, source).items()}
            db.executemany('INSERT INTO cdc_marks VALUES (?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING',
                           [(source, m.partition, m.offset, _kind(m.kind), m.event_time_us, m.watermark_us,
                             m.rows, m.ts_ms) for m in marks if m.offset >= sealed.get(m.partition, -1)])
            db.executemany('INSERT INTO cdc_metadata VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING',
                           [(source, topic, m.partition, m.offset, m.key, m.value) for m in metadata])
            for b in bad:
                cur = db.execute('INSERT INTO cdc_quarantine VALUES (?,?,?,?,?,?,?) ON CONFLICT DO NOTHING',
                                 (source, topic, b.partition, b.offset, b.part, b.kind, b.reason))
                quarantined += cur.rowcount
            for p, pr in progress.items():
                # The state belongs to next_offset: it moves only forward, and only with it.
                db.execute(
                    "INSERT INTO cdc_progress VALUES (?,?,?,?,?,?,?) ON CONFLICT (source, topic, partition) DO UPDATE "
                    "SET next_offset = excluded.next_offset, "
                    "last_ts_ms = coalesce(excluded.last_ts_ms, cdc_progress.last_ts_ms), "
                    "state = excluded.state WHERE excluded.next_offset >= cdc_progress.next_offset",
                    (source, topic, p, pr.next_offset, pr.sealed_to, pr.last_ts_ms,
                     json.dumps(pr.state, sort_keys=True)))
        return quarantined

    # --- sealing --------------------------------------------------------------------------
    def tail(self, source: str) -> Tail:
        """The unsealed tail of `source`: pending marks per partition and where sealing stands."""
        with self._connect() as db:
            return self._tail(db, source)

    def _tail(self, db: Connection, source: str) -> Tail:
        bound = db.execute("SELECT topic FROM cdc_sources WHERE source = ?", (source,)).fetchone()
        progress = self._progress(db, source)
        last = db.execute("SELECT max(delta_num), max(watermark_us) FROM cdc_sealed WHERE source = ? "
                          "AND delta_num = (SELECT max(delta_num) FROM cdc_sealed WHERE source = ?)",
                          (source, source)).fetchone()
        marks: dict[int, list[Mark]] = {p: [] for p in progress}
        rows = db.execute('SELECT partition, "offset", kind, event_time_us, watermark_us, rows, ts_ms FROM cdc_marks '
                          'WHERE source = ? ORDER BY partition, "offset"', (source,))
        for p, o, kind, et, wm, n, ts in rows:
            marks.setdefault(p, []).append(Mark(p, o, kind, et, wm, n, ts))
        next_delta = 0 if last is None or last[0] is None else last[0] + 1
        return Tail(source, bound[0] if bound else "", next_delta, None if last is None else last[1], progress, marks)

    def seal(self, source: str, delta_num: int, ends: Mapping[int, int], *, watermark_us: int | None,
             starts: Mapping[int, int], reason: str | None = None) -> SealedDelta:
        """Seal delta `delta_num`: per partition the range [sealed_to, ends[p]) (partitions not in
        `ends` get an empty range), atomically with removing its marks and moving `sealed_to`.
        `starts` is what the caller read as `sealed_to`: if the ledger moved since, or
        `delta_num` is not the next number, `LedgerConflict` is raised and nothing is written."""
        sealed_at = _now()
        with self._transaction(source) as db:
            topic_row = db.execute("SELECT topic FROM cdc_sources WHERE source = ?", (source,)).fetchone()
            if topic_row is None:
                raise LedgerError(f"source {source!r} is not registered in {self.where}")
            topic = topic_row[0]
            top = db.execute("SELECT max(delta_num) FROM cdc_sealed WHERE source = ?", (source,)).fetchone()[0]
            expected = 0 if top is None else top + 1
            if delta_num != expected:
                raise LedgerConflict(f"source {source!r}: asked to seal delta {delta_num}, the next is {expected}")
            progress = self._progress(db, source)
            moved = {p: (starts.get(p), pr.sealed_to) for p, pr in progress.items() if starts.get(p) != pr.sealed_to}
            if moved:
                raise LedgerConflict(f"source {source!r}: sealed_to moved since it was read {moved}")
            unknown = set(ends) - set(progress)
            if unknown:
                raise LedgerError(f"source {source!r}: no progress for partitions {sorted(unknown)}")
            ranges: dict[int, tuple[int, int]] = {}
            total = 0
            for p, pr in sorted(progress.items()):
                start, end = pr.sealed_to, ends.get(p, pr.sealed_to)
                if end < start or end > pr.next_offset:
                    raise LedgerError(f"source {source!r} partition {p}: cannot seal [{start}, {end}): "
                                      f"sealed up to {start}, scanned up to {pr.next_offset}")
                rows = db.execute('SELECT coalesce(sum(rows), 0) FROM cdc_marks WHERE source = ? AND partition = ? '
                                  'AND "offset" < ?', (source, p, end)).fetchone()[0]
                db.execute('DELETE FROM cdc_marks WHERE source = ? AND partition = ? AND "offset" < ?',
                           (source, p, end))
                db.execute("UPDATE cdc_progress SET sealed_to = ? WHERE source = ? AND partition = ?", (end, source, p))
                db.execute("INSERT INTO cdc_sealed VALUES (?,?,?,?,?,?,?,?,?,?)",
                           (source, delta_num, topic, p, start, end, watermark_us, rows, sealed_at, reason))
                ranges[p] = (start, end)
                total += rows
        return SealedDelta(source, topic, delta_num, ranges, watermark_us, total, sealed_at, reason)

    # --- queries --------------------------------------------------------------------------
    def sealed_deltas(self, source: str) -> list[SealedDelta]:
        """Every sealed delta of `source`, by number."""
        with self._connect() as db:
            rows = db.execute("SELECT delta_num, topic, partition, start_offset, end_offset, watermark_us, rows, "
                              "sealed_at, reason FROM cdc_sealed WHERE source = ? ORDER BY delta_num, partition",
                              (source,)).fetchall()
        return _deltas(source, rows)

    def sealed_numbers(self, source: str, start: int = 0, limit: int | None = None) -> list[int]:
        """The numbers of `source`'s sealed deltas from `start` on, in order (at most `limit`):
        what a sensor requests, without loading every delta's ranges."""
        with self._connect() as db:
            rows = db.execute("SELECT DISTINCT delta_num FROM cdc_sealed WHERE source = ? AND delta_num >= ? "
                              "ORDER BY delta_num" + ("" if limit is None else f" LIMIT {int(limit)}"),
                              (source, start)).fetchall()
        return [r[0] for r in rows]

    def delta(self, source: str, n: int) -> SealedDelta:
        """Delta `n` of `source`; `LedgerError` if it is not sealed."""
        with self._connect() as db:
            rows = db.execute("SELECT delta_num, topic, partition, start_offset, end_offset, watermark_us, rows, "
                              "sealed_at, reason FROM cdc_sealed WHERE source = ? AND delta_num = ? ORDER BY partition",
                              (source, n)).fetchall()
        if not rows:
            raise LedgerError(f"delta {n} of source {source!r} is not sealed in {self.where}")
        return _deltas(source, rows)[0]

    def metadata_messages(self, source: str, upto: int | None = None) -> list[StoredMessage]:
        """The stored Qlik metadata messages of `source` in (partition, offset) order: all of them
        (None), or those before delta `upto` starts: what a decoder must have seen to read delta
        `upto` (which may be the next, unsealed one)."""
        with self._connect() as db:
            rows = db.execute('SELECT topic, partition, "offset", key, value FROM cdc_metadata WHERE source = ? '
                              'ORDER BY partition, "offset"', (source,)).fetchall()
            if upto is None:
                starts = None
            else:
                got = db.execute("SELECT partition, start_offset FROM cdc_sealed WHERE source = ? AND delta_num = ?",
                                 (source, upto)).fetchall()
                if got:
                    starts = dict(got)
                elif upto == self._tail(db, source).next_delta:
                    starts = {p: pr.sealed_to for p, pr in self._progress(db, source).items()}
                else:
                    raise LedgerError(f"delta {upto} of source {source!r} is neither sealed nor the next one")
        return [StoredMessage(t, p, o, None if k is None else bytes(k), bytes(v)) for t, p, o, k, v in rows
                if starts is None or o < starts.get(p, 0)]

    def quarantined_count(self, source: str) -> int:
        """How many messages of `source` are quarantined (its sensor observes it every tick)."""
        with self._connect() as db:
            return db.execute("SELECT count(*) FROM cdc_quarantine WHERE source = ?", (source,)).fetchone()[0]

    def quarantine(self, source: str) -> list[dict]:
        """The bad messages of `source`: topic, partition, offset, part, kind, reason."""
        with self._connect() as db:
            rows = db.execute('SELECT topic, partition, "offset", part, kind, reason FROM cdc_quarantine '
                              'WHERE source = ? ORDER BY partition, "offset"', (source,)).fetchall()
        return [dict(zip(("topic", "partition", "offset", "part", "kind", "reason"), r)) for r in rows]


def _deltas(source: str, rows: list[tuple]) -> list[SealedDelta]:
    out: list[SealedDelta] = []
    by_num: dict[int, list[tuple]] = {}
    for r in rows:
        by_num.setdefault(r[0], []).append(r)
    for n, parts in sorted(by_num.items()):
        _, topic, _, _, _, wm, _, at, reason = parts[0]
        out.append(SealedDelta(source, topic, n, {p: (s, e) for _, _, p, s, e, *_ in parts}, wm,
                               sum(r[6] for r in parts), at, reason))
    return out


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise LedgerError(f"mark kind {kind!r} is none of {KINDS}")
    return kind


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
