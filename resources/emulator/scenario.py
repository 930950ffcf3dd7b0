"""The Prostore emulator's timeline: what a real Prostore would publish, message by message.

`build_scenario(config)` plays a deterministic story (from `config.seed`) on one or more logical
databases: DDL, deltas opened and closed with inserts, updates and deletes, cancelled deltas,
writes outside deltas; after each DELTA_CLOSE, a `BACKUP_TO_KAFKA` increment of that delta.
It returns the messages in production order (bytes, ready for Kafka; nothing is sent here) and
the truth: every table's rows after every closed delta, the oracle for the lake.

Faults are opt-in (`Faults`) and recorded in `Scenario.injected`, so a test can check that a
reader finds every one of them.

Decisions where the seeds are silent (see also the spec digests):
- Delta numbers start at 0; a cancelled delta's number is reused by the next DELTA_OPEN, since
  Prostore numbers only committed deltas.
- A write outside any delta is committed at once; its rows travel in the increment of the next
  delta that closes, and its WRITE_OK lies outside every DELTA_OPEN..DELTA_CLOSE.
- Each row changes at most once per increment (Prostore keeps one version per row per delta).
- Stream s of an export writes to partition (s - 1) mod partitions; the changelog is the first
  message of stream 1; a stream's messages carry isLastChunk on its last one.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
import zlib
from dataclasses import dataclass, field

from resources.codecs.backup_writer import BackupWriteOptions, TableChanges, encode_increment
from resources.codecs.signal import (
    DeltaCancel,
    DeltaClose,
    DeltaOpen,
    SchemaChanged,
    SignalEvent,
    SignalKey,
    WriteCancel,
    WriteOk,
    encode_signal,
)
from resources.emulator.malformed import inject_malformed
from resources.emulator.outgoing import BACKUP, SIGNAL, Outgoing
from resources.emulator.model import Change, Key, LogicalDatabase, Row
from resources.emulator.schemas import COLUMN_DDL, DATAMART_DDL, LATER_DDL


@dataclass(frozen=True)
class Faults:
    """Faults to inject; each is a real failure mode of Kafka or BACKUP_TO_KAFKA."""

    duplicate_rate: float = 0.0  # chance each message is delivered twice (at-least-once)
    lost_chunk_deltas: tuple[int, ...] = ()  # these deltas' increments lose one message
    reexport_deltas: tuple[int, ...] = ()  # exported again, later, with a new incrementId
    lagging_deltas: tuple[int, ...] = ()  # backup written `lag` deltas after DELTA_CLOSE
    lag: int = 2
    malformed: bool = False  # one malformed message of each kind in each topic


@dataclass(frozen=True)
class EmulatorConfig:
    seed: int = 42
    deltas: int = 8  # closed deltas per datamart
    datamarts: tuple[str, ...] = ("marketing", "sourcedb")
    rows_per_delta: int = 12  # row changes per table per delta, about
    chunk_size: int = 1000  # rows per backup message (--chunkSize)
    streams: int = 1  # writing streams (--threadsCount)
    backup_partitions: int = 1  # (--partitionsCount)
    signal_partitions: int = 1
    numbering: str = "stream"  # chunk numbers per "stream" or per "table" within a stream
    logical_types: bool = True  # Avro logical-type annotations on the row schema
    codec: str = "null"  # Avro container codec: null, deflate, snappy
    cancel_rate: float = 0.15
    outside_write_rate: float = 0.2
    ddl_at_delta: int | None = 4  # before this delta: a new table, a view created, one dropped
    # Opt-in column changes (schemas.COLUMN_DDL): before this delta, ALTER TABLE marketing.stores
    # ADD COLUMN manager; before this delta + 2, city renamed to town and region_code dropped.
    column_changes_at_delta: int | None = None
    start: dt.datetime = dt.datetime(2024, 2, 28, 8, 0, 0)
    faults: Faults = field(default_factory=Faults)
    # (at, skip): the story's deltas from the at-th on are numbered skip higher, as if `skip`
    # deltas had closed in between (bench/age_bench.py writes those into the lake itself).
    number_gap: tuple[int, int] | None = None

    def number(self, story_delta: int) -> int:
        """The delta number Prostore gives the story's `story_delta`-th delta."""
        gap = self.number_gap
        return story_delta + (gap[1] if gap is not None and story_delta >= gap[0] else 0)


@dataclass
class Scenario:
    config: EmulatorConfig
    messages: list[Outgoing] = field(default_factory=list)
    # truth[datamart][delta] = {table: {primary key tuple: row}} after that delta closed
    truth: dict[str, dict[int, dict[str, dict[Key, Row]]]] = field(default_factory=dict)
    delta_dates: dict[str, dict[int, dt.datetime]] = field(default_factory=dict)
    # the changes of each closed delta, in order, for snapshot backups and reconciliation
    increments: dict[str, dict[int, list[Change]]] = field(default_factory=dict)
    cancelled: dict[str, list[int]] = field(default_factory=dict)
    injected: dict[str, list] = field(default_factory=dict)  # fault kind -> [(datamart, delta, ...)]
    databases: dict[str, LogicalDatabase] = field(default_factory=dict)
    # ddl_versions[datamart][delta] = changelog length when the delta closed (its truth's columns)
    ddl_versions: dict[str, dict[int, int]] = field(default_factory=dict)

    def record(self, kind: str, *what) -> None:
        self.injected.setdefault(kind, []).append(what)


class _Writer:
    """Turns model events into encoded messages, applying duplicate faults on the way."""

    def __init__(self, scenario: Scenario, rng: random.Random):
        self.s = scenario
        self.cfg = scenario.config
        self.rng = rng

    def sync(self) -> bytes:
        """A seeded Avro sync marker: the same seed gives the same bytes, not only the same rows."""
        return self.rng.randbytes(16)

    def emit(self, msg: Outgoing, out: list[Outgoing] | None = None) -> None:
        target = self.s.messages if out is None else out
        target.append(msg)
        if self.rng.random() < self.cfg.faults.duplicate_rate:
            target.append(msg)
            self.s.record("duplicate", msg.role, msg.note)

    def signal(self, datamart: str, when: dt.datetime, value: object) -> None:
        code = {
            DeltaOpen: "DELTA_OPEN", DeltaClose: "DELTA_CLOSE", DeltaCancel: "DELTA_CANCEL",
            WriteOk: "WRITE_OK", WriteCancel: "WRITE_CANCEL", SchemaChanged: "DATAMART_SCHEMA_CHANGED",
        }[type(value)]
        key = SignalKey(datamart, when.replace(tzinfo=dt.timezone.utc), code, str(uuid.UUID(int=self.rng.getrandbits(128), version=4)))
        k, v = encode_signal(SignalEvent(key, value))
        # One datamart's events stay in one partition: Prostore promises order only per datamart.
        part = zlib.crc32(datamart.encode()) % self.cfg.signal_partitions
        self.emit(Outgoing(SIGNAL, part, k, v, f"{datamart}:{code}"))

    def export(self, db: LogicalDatabase, delta: int, date: dt.datetime, changes: list[Change],
               *, lose_one: bool = False) -> list[Outgoing]:
        """Encode one BACKUP_TO_KAFKA increment of `delta`; returns its messages."""
        cfg = self.cfg
        increment_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        date_us = int((date - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000 + date.microsecond
        by_table: dict[str, list[Row]] = {}
        for ch in changes:
            # Data written before a later ALTER is exported in the columns the table has now.
            row = db.conform(ch.table, ch.row, ch.ddl_version)
            by_table.setdefault(ch.table, []).append({**row, "sys_op": ch.sys_op})
        tables = {t: TableChanges(db.tables[t].columns if t in db.tables else None, rows) for t, rows in by_table.items()}
        options = BackupWriteOptions(chunk_size=cfg.chunk_size, streams=cfg.streams, partitions=cfg.backup_partitions,
                                     numbering=cfg.numbering, logical_types=cfg.logical_types, codec=cfg.codec)
        msgs = encode_increment(db.name, delta, date_us, increment_id, db.changelog, tables, options, sync=self.sync)
        if lose_one:
            data = [i for i, m in enumerate(msgs) if m.table is not None] or list(range(len(msgs)))
            lost = msgs.pop(self.rng.choice(data))
            self.s.record("lost_chunk", db.name, delta, increment_id, lost.note)
        return [Outgoing(BACKUP, m.partition, m.key, m.value, m.note) for m in msgs]


def build_scenario(config: EmulatorConfig) -> Scenario:
    """Play the story of `config`; deterministic for a given config."""
    rng = random.Random(config.seed)
    sc = Scenario(config)
    w = _Writer(sc, rng)
    clock = {name: config.start for name in config.datamarts}
    pending: list[tuple[int, list[Outgoing]]] = []  # lagging exports: (release after step, messages)
    reexports: list[tuple[int, str, int]] = []  # (at step, datamart, delta)

    def tick(name: str, lo: float = 0.05, hi: float = 30.0) -> dt.datetime:
        clock[name] += dt.timedelta(seconds=rng.uniform(lo, hi))
        return clock[name]

    for name in config.datamarts:
        db = LogicalDatabase(name, rng)
        sc.databases[name] = db
        sc.truth[name], sc.delta_dates[name], sc.increments[name], sc.cancelled[name] = {}, {}, {}, []
        sc.ddl_versions[name] = {}
        for entity, definition, query in DATAMART_DDL[name]:
            db.run_ddl(entity, query)
            w.signal(name, tick(name), SchemaChanged(name, entity, definition, tick(name, 0, 0.01).replace(tzinfo=dt.timezone.utc)))

    state = {name: {"delta": 0, "cn": 0, "outside": [], "touched": set()} for name in config.datamarts}
    step = 0
    while any(st["delta"] < config.deltas for st in state.values()):
        step += 1
        for name in config.datamarts:
            st, db = state[name], sc.databases[name]
            if st["delta"] >= config.deltas:
                continue
            delta = st["delta"]
            if config.ddl_at_delta is not None and delta == config.ddl_at_delta and not st.get("ddl_done"):
                st["ddl_done"] = True
                for entity, definition, query in LATER_DDL.get(name, []):
                    db.run_ddl(entity, query)
                    w.signal(name, tick(name), SchemaChanged(name, entity, definition, clock[name].replace(tzinfo=dt.timezone.utc)))
            if config.column_changes_at_delta is not None:
                for offset, statements in sorted(COLUMN_DDL.get(name, {}).items()):
                    if delta != config.column_changes_at_delta + offset or st.get(f"columns_done_{offset}"):
                        continue
                    st[f"columns_done_{offset}"] = True
                    for entity, definition, query in statements:
                        db.run_ddl(entity, query)
                        w.signal(name, tick(name), SchemaChanged(name, entity, definition, clock[name].replace(tzinfo=dt.timezone.utc)))
            if rng.random() < config.outside_write_rate:
                st["outside"] += _write_op(w, db, st, tick(name), config)
            number = config.number(delta)
            before = db.state()
            touched_before = set(st["touched"])
            w.signal(name, tick(name), DeltaOpen(number))
            changes: list[Change] = []
            for _ in range(rng.randint(1, 3)):
                changes += _write_op(w, db, st, tick(name), config)
            if rng.random() < config.cancel_rate:
                db.restore(before)
                st["touched"] = touched_before
                w.signal(name, tick(name), DeltaCancel(number))
                sc.cancelled[name].append(number)
                continue
            # Fractions of every length the seed shows: none, milliseconds, microseconds.
            # (tick adds >= 1 s, so dropping the fraction never goes back in time.)
            date = tick(name, 1.0).replace(microsecond=rng.choice([0, rng.randrange(1000) * 1000, rng.randrange(10**6)]))
            clock[name] = date
            w.signal(name, date, DeltaClose(number, date.replace(tzinfo=dt.timezone.utc)))
            increment = st["outside"] + changes
            st["outside"], st["touched"] = [], set()
            sc.truth[name][number] = db.state()
            sc.ddl_versions[name][number] = len(db.changelog)
            sc.delta_dates[name][number] = date
            sc.increments[name][number] = increment
            faults = config.faults
            msgs = w.export(db, number, date, increment, lose_one=number in faults.lost_chunk_deltas)
            if number in faults.lagging_deltas:
                pending.append((step + faults.lag, msgs))
                sc.record("lagging", name, number)
            else:
                for m in msgs:
                    w.emit(m)
            if number in faults.reexport_deltas:
                reexports.append((step + 1, name, number))
            st["delta"] += 1
        _release(sc, w, pending, reexports, step)
    _release(sc, w, pending, reexports, None)  # what is still held back goes out at the end
    if config.faults.malformed:
        inject_malformed(sc, rng)
    return sc


def _release(sc: Scenario, w: _Writer, pending: list, reexports: list, step: int | None) -> None:
    """Send the lagging exports and re-exports that are due at `step` (all of them if None)."""
    for item in [p for p in pending if step is None or p[0] <= step]:
        pending.remove(item)
        for m in item[1]:
            w.emit(m)
    for item in [r for r in reexports if step is None or r[0] <= step]:
        reexports.remove(item)
        _, name, delta = item
        msgs = w.export(sc.databases[name], delta, sc.delta_dates[name][delta], sc.increments[name][delta])
        sc.record("reexport", name, delta, msgs[0].note.split(":")[2])
        for m in msgs:
            w.emit(m)


def _write_op(w: _Writer, db: LogicalDatabase, st: dict, when: dt.datetime, cfg: EmulatorConfig) -> list[Change]:
    """One write operation on a random table: WRITE_OK with its rowsAffected, or WRITE_CANCEL."""
    rng = w.rng
    table = rng.choice(sorted(db.tables))
    st["cn"] += 1
    ts = int((when - dt.datetime(1970, 1, 1)).total_seconds() * 1_000_000)
    if rng.random() < 0.08:
        w.signal(db.name, when, WriteCancel(table, st["cn"]))
        return []
    n = max(1, cfg.rows_per_delta)
    changes = db.write(table, inserts=rng.randint(1, n), updates=rng.randint(0, n // 2),
                       deletes=rng.randint(0, max(1, n // 4)), touched=st["touched"])
    w.signal(db.name, when, WriteOk(table, st["cn"], ts, len(changes)))
    return changes


def snapshot_export(sc: Scenario, datamart: str, depth: int = 0, *,
                    as_of: int | None = None) -> tuple[list[Outgoing], dict[int, int]]:
    """A snapshot backup (`--snapshotDepth depth`) of `datamart`, for a topic of its own.

    Delta 0 holds the full state as of the source delta `depth` deltas before `as_of` (default:
    the last closed delta; every row with sys_op 0); deltas 1..depth then replay the later
    increments up to `as_of`, renumbered as the seed says. Returns the messages and
    {snapshot delta: source delta}, so the oracle for snapshot delta i is
    `sc.truth[datamart][mapping[i]]`. (`as_of` lets a test bootstrap a lake at a past delta and
    go on with the live increments after it.)
    """
    closed = sorted(sc.truth[datamart])
    if not closed:
        raise ValueError(f"datamart {datamart!r} has no closed delta to snapshot")
    if as_of is not None:
        if as_of not in sc.truth[datamart]:
            raise ValueError(f"delta {as_of} of {datamart!r} was not closed (closed: {closed})")
        closed = [d for d in closed if d <= as_of]
    base = closed[max(0, len(closed) - 1 - depth)]
    # Seeded by what is exported: each snapshot run gets its own incrementIds, as in Prostore.
    w = _Writer(sc, random.Random(f"{sc.config.seed}:snapshot:{depth}:{as_of}"))
    db = sc.databases[datamart]
    version = sc.ddl_versions[datamart][base]
    state = [Change(t, dict(r), 0, version) for t, rows in sorted(sc.truth[datamart][base].items()) for r in rows.values()]
    out = w.export(db, 0, sc.delta_dates[datamart][base], state)
    mapping = {0: base}
    for i, src in enumerate((d for d in closed if d > base), start=1):
        out += w.export(db, i, sc.delta_dates[datamart][src], sc.increments[datamart][src])
        mapping[i] = src
    return out, mapping
