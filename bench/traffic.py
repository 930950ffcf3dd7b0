"""BACKUP_TO_KAFKA traffic for the platform benchmark: the seed's `marketing.sales`, big.

What flows out: per delta, the messages Prostore's BACKUP_TO_KAFKA would write for one table
(a changelog message first in stream 1, then table-data chunks of `chunk_rows` rows, spread
over `streams` writing streams, stream s on partition (s - 1) mod partitions, chunk numbers
counted per stream, isLastChunk on each stream's last message), as `Outgoing` ready for
`resources.kafka.publish.publish`. Rows are the seed's row schema (TIMESTAMP as a plain
long, every field `["null", T]`), written by the project's own codec (`encode_rows`).

A `DeltaPlanner` draws each delta's changes: mostly inserts of new keys, some updates and
deletes (sys_op 1) of keys alive before the delta, each key changed at most once per delta
(Prostore keeps one version per row per delta). It knows how many keys are alive, so the
benchmark can check the snapshot's row count without an oracle of every row.

A `LocalityPlanner` draws the same mix with key locality (issue 42): inserts take increasing
keys, and most updates and deletes hit the newest keys (by default 90% on the newest 5%).

`filler_messages` re-keys already encoded values under another datamart: bytes that make the
topic bigger without costing an encode, for the topic-growth measurement.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from resources.codecs.backup import ChangelogRecord, encode_changelog, encode_rows
from resources.codecs.backup_writer import BackupWriteOptions, increment_messages
from resources.codecs.ddl import EntitySchema, replay_changelog
from resources.emulator.outgoing import BACKUP, Outgoing
from resources.emulator.schemas import DATAMART_DDL

TABLE = "sales"
CHUNK_ROWS = 1000  # Prostore's default --chunkSize
DESCRIPTIONS = ("Покупка по акции 1+1", "Покупка без акций", None)
BASE_TS_US = 1_614_269_474_000_000  # the seed's transaction_date, µs
START = dt.datetime(2024, 2, 28, 8, 0, 0)

# The seed's DDL of marketing.sales, verbatim (unbalanced parenthesis and all).
SALES_DDL = next(q for name, _, q in DATAMART_DDL["marketing"] if name == TABLE)


def sales_schema(datamart: str) -> tuple[list[ChangelogRecord], EntitySchema]:
    """The changelog of a datamart holding only the seed's `sales` table, and its parsed schema
    (through the project's DDL parser)."""
    ddl = SALES_DDL.replace("marketing.", f"{datamart}.", 1)
    records = [ChangelogRecord(1, datamart, ddl)]
    return records, replay_changelog(records)[TABLE]


def row(key: int, version: int = 0) -> dict:
    """The canonical Python row of `key` at `version` (an update bumps the version)."""
    i = key + 7919 * version
    return {
        "id": key,
        "transaction_date": dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=BASE_TS_US + i * 1_000_003),
        "product_code": f"ABC{102_101 + i % 5000}",
        "product_units": 1 + i % 7,
        "store_id": 1_000_000_000 + i % 12_345,
        "description": DESCRIPTIONS[i % 3],
    }


def delta_date_us(delta: int) -> int:
    return int((START + dt.timedelta(minutes=delta) - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000


@dataclass
class DeltaChanges:
    delta: int
    rows: list[dict]  # canonical rows with sys_op
    inserts: int
    updates: int
    deletes: int


class DeltaPlanner:
    """Draws the changes of successive deltas of one table; tracks the keys alive.

    `alive` starts as keys 1..`initial` (a state written some other way, e.g. straight to the
    lake); new keys are numbered after every key ever used.
    """

    def __init__(self, *, seed: int, initial: int = 0, update_share: float = 0.15, delete_share: float = 0.05):
        if update_share < 0 or delete_share < 0 or update_share + delete_share > 1:
            raise ValueError("update_share and delete_share must be >= 0 and sum to at most 1")
        self.rng = random.Random(seed)
        self.alive = list(range(1, initial + 1))
        self.next_key = initial + 1
        self.update_share, self.delete_share = update_share, delete_share

    def delta(self, delta: int, rows: int) -> DeltaChanges:
        n_upd = min(int(rows * self.update_share), len(self.alive))
        n_del = min(int(rows * self.delete_share), len(self.alive) - n_upd)
        n_ins = rows - n_upd - n_del
        picked = self.rng.sample(range(len(self.alive)), n_upd + n_del)  # distinct: one change per key
        changes = [{**row(self.alive[i], delta + 1), "sys_op": 0} for i in picked[:n_upd]]
        doomed = picked[n_upd:]
        changes += [{**row(self.alive[i], 0), "sys_op": 1} for i in doomed]
        for i in sorted(doomed, reverse=True):  # swap-remove, highest index first
            self.alive[i] = self.alive[-1]
            self.alive.pop()
        new = range(self.next_key, self.next_key + n_ins)
        changes += [{**row(k), "sys_op": 0} for k in new]
        self.alive.extend(new)
        self.next_key += n_ins
        self.rng.shuffle(changes)
        return DeltaChanges(delta, changes, n_ins, n_upd, n_del)

    def alive_count(self) -> int:
        return len(self.alive)

    def alive_sum(self) -> int:
        return sum(self.alive)


class LocalityPlanner:
    """`DeltaPlanner`'s mix of changes with key locality: inserts take new, increasing keys, and
    a share `recent_share` of the updates and deletes hit the newest `recent_fraction` of the
    key range, the rest any key. Keys alive are 1..next_key-1 minus `deleted` (no list of every
    key: a 20M-row table's alive set would cost more than the bench measures), so `alive_count`
    and `alive_sum` are O(1) and O(deleted)."""

    def __init__(self, *, seed: int, initial: int = 0, update_share: float = 0.15, delete_share: float = 0.05,
                 recent_share: float = 0.9, recent_fraction: float = 0.05):
        if update_share < 0 or delete_share < 0 or update_share + delete_share > 1:
            raise ValueError("update_share and delete_share must be >= 0 and sum to at most 1")
        self.rng = random.Random(seed)
        self.next_key, self.deleted = initial + 1, set()
        self.update_share, self.delete_share = update_share, delete_share
        self.recent_share, self.recent_fraction = recent_share, recent_fraction

    def alive_count(self) -> int:
        return self.next_key - 1 - len(self.deleted)

    def alive_sum(self) -> int:
        return (self.next_key - 1) * self.next_key // 2 - sum(self.deleted)

    def _pick(self, count: int) -> list[int]:
        """`count` distinct alive keys, `recent_share` of them from the newest keys."""
        newest = max(1, self.next_key - int(self.recent_fraction * (self.next_key - 1)))
        picked: dict[int, None] = {}
        while len(picked) < count:
            low = newest if self.rng.random() < self.recent_share else 1
            key = self.rng.randrange(low, self.next_key)
            if key not in self.deleted:
                picked[key] = None
        return list(picked)

    def delta(self, delta: int, rows: int) -> DeltaChanges:
        n_upd = min(int(rows * self.update_share), self.alive_count())
        n_del = min(int(rows * self.delete_share), self.alive_count() - n_upd)
        n_ins = rows - n_upd - n_del
        picked = self._pick(n_upd + n_del)
        changes = [{**row(k, delta + 1), "sys_op": 0} for k in picked[:n_upd]]
        changes += [{**row(k, 0), "sys_op": 1} for k in picked[n_upd:]]
        self.deleted.update(picked[n_upd:])
        changes += [{**row(k), "sys_op": 0} for k in range(self.next_key, self.next_key + n_ins)]
        self.next_key += n_ins
        self.rng.shuffle(changes)
        return DeltaChanges(delta, changes, n_ins, n_upd, n_del)


def encode_chunks(entity: EntitySchema, rows: Sequence[dict], chunk_rows: int = CHUNK_ROWS) -> list[bytes]:
    """Table-data message values of `chunk_rows` rows, in the seed's row schema."""
    return [encode_rows(entity.columns, rows[i:i + chunk_rows], logical_types=False)
            for i in range(0, len(rows), chunk_rows)]


def export(datamart: str, delta: int, changelog: bytes, table: str | None, chunks: Sequence[bytes], *,
           streams: int = 2, partitions: int = 2, increment_id: str | None = None) -> list[Outgoing]:
    """One increment's messages, as BACKUP_TO_KAFKA writes them (see the module docstring): the
    project's own layout (`backup_writer.increment_messages`) over already encoded values."""
    bodies: list[tuple[str | None, bytes]] = [(None, changelog)] + [(table, c) for c in chunks]
    msgs = increment_messages(datamart, delta, delta_date_us(delta), increment_id or str(uuid.uuid4()), bodies,
                              BackupWriteOptions(streams=streams, partitions=partitions))
    return [Outgoing(BACKUP, m.partition, m.key, m.value, m.note) for m in msgs]


def filler_messages(datamart: str, messages: int, changelog: bytes, chunks: Sequence[bytes], *,
                    deltas_of: int = 20, streams: int = 2, partitions: int = 2) -> list[Outgoing]:
    """About `messages` messages of another datamart, re-using encoded `chunks` (cycled):
    increments of `deltas_of` data messages each, numbered from delta 0."""
    out: list[Outgoing] = []
    delta, k = 0, 0
    while len(out) < messages:
        take = [chunks[(k + i) % len(chunks)] for i in range(min(deltas_of, messages - len(out)))]
        k += len(take)
        out += export(datamart, delta, changelog, TABLE, take, streams=streams, partitions=partitions)
        delta += 1
    return out


def changelog_value(records: Sequence[ChangelogRecord]) -> bytes:
    return encode_changelog(records)
