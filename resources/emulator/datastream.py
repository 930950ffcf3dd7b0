"""Datastream emulator: the events a Google Cloud Datastream stream would put on Kafka, and the truth.

`build_datastream_story(config)` plays a deterministic story (from `config.seed`) on two sources:
a MySQL database `shop` (tables `customers`, key `id`, and `orders`, key `(region, order_id)`)
behind one stream, and an Oracle schema `SALES` (table `INVOICES`) behind another. It returns the
messages in production order (role "datastream", JSON by default, Avro containers of one event with
`fmt="avro"`; nothing is sent here) and the truth, `state_at(event_time_us)`.

The story, in the spirit of the seed (004) and the Prostore emulator:
- Rows exist before the streams start (`initial`). A backfill (`mysql-backfill-fulldump`,
  `oracle-backfill`) reads each table in chunks (rows split by a hash of their key, as a chunked
  SELECT would), at chunk times spread over the first third of the story, while CDC runs: a read
  returns the row as it is at that moment (so a row may be read before or after its CDC changes,
  or twice under two keys around a key change, or not at all if deleted before its chunk).
- CDC: INSERT, UPDATE-INSERT, DELETE on MySQL, with multi-row transactions (one source time,
  consecutive log positions) and key-changing updates as UPDATE-DELETE (old row) + UPDATE-INSERT
  (new row) at ONE log position (one binlog row event holds both images). The binlog starts at
  mysql-bin.999997 and rotates, so file numbers grow past six digits (mysql-bin.1000000).
  Oracle: INSERT, UPDATE (the seed's own change_type), DELETE, a primary-key change (an UPDATE that
  keeps its rowid), and rolled-back transactions, which LogMiner shows as the inverse DML (an
  INSERT, then its DELETE, same tx_id). MySQL has no such case: the binlog holds committed
  transactions only.
- Delivery: each event's first copy is produced at its source time plus a random delay below
  `max_lateness_ms`, so any event produced before another is at most that much newer: a consumer
  that has seen event time T has seen every event with time <= T - max lateness (backfill reads
  included). Duplicates (same uuid, re-read: only read_timestamp differs) arrive minutes later,
  outside that bound (`duplicate_delay_ms`).

Truth: `state_at(t)` is the initial rows plus every change with source_timestamp <= t, applied in
the true (log) order, as `{"<namespace>.<table>": {key tuple: row}}`. MySQL rows are keyed by their
primary key; Oracle rows by `(ROWID,)` with the rowid in the row under `ROWID`, as the codec keys
them (Oracle events carry no key list). The truth is the log's view: a rolled-back row exists
between its INSERT and its inverse DELETE, because that is what the stream says.
Deterministic: every random choice comes from `random.Random(config.seed)`; Avro sync markers are
derived from the event's uuid, so JSON and Avro stories of one seed tell the same events.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from resources.codecs.datastream import ROWID, avro_event_schema, encode_avro_events, encode_json_event
from resources.emulator.outgoing import Outgoing

DATASTREAM = "datastream"
MYSQL_STREAM = "projects/deltaport/locations/europe-west1/streams/shop-mysql"
ORACLE_STREAM = "projects/deltaport/locations/europe-west1/streams/sales-oracle"

Row = dict[str, Any]
Key = tuple


@dataclass(frozen=True)
class TableDef:
    source: str  # "mysql" | "oracle"
    namespace: str
    name: str
    columns: tuple[tuple[str, Any], ...]  # (column, Avro type) in column index order
    primary_key: tuple[str, ...]  # the real primary key

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def key(self) -> tuple[str, ...]:
        """The key the truth (and the codec) uses: the primary key, or ROWID on Oracle."""
        return (ROWID,) if self.source == "oracle" else self.primary_key

    def key_of(self, row: Row) -> Key:
        return tuple(row[c] for c in self.key)


CUSTOMERS = TableDef("mysql", "shop", "customers",
                     (("id", "long"), ("name", "string"), ("email", ["null", "string"]), ("tier", "string")), ("id",))
ORDERS = TableDef("mysql", "shop", "orders", (("region", "string"), ("order_id", "long"), ("customer_id", "long"),
                                              ("amount", "double"), ("status", "string")), ("region", "order_id"))
INVOICES = TableDef("oracle", "SALES", "INVOICES", (("INVOICE_ID", "long"), ("CUSTOMER", "string"),
                                                    ("AMOUNT", "double"), ("STATUS", ["null", "string"])), ("INVOICE_ID",))
TABLES = (CUSTOMERS, ORDERS, INVOICES)

_NAMES = ["Ada", "Brice", "Chloé", "Dmitri", "Eun-ji", "Farid", "Grete", "Hugo", "Ines", "Jonas", "Kenji", "Lotte"]
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"  # Oracle's rowid digits


@dataclass(frozen=True)
class DatastreamConfig:
    seed: int = 42
    fmt: str = "json"  # "json" or "avro"
    steps: int = 200  # CDC operations (a transaction or a key change counts as one)
    initial_rows: int = 10  # rows per table before the streams start
    backfill_chunks: int = 3  # chunks per table
    max_lateness_ms: int = 20_000  # bound on a first delivery's delay after its source time
    duplicate_rate: float = 0.06
    duplicate_delay_ms: tuple[int, int] = (60_000, 300_000)
    partitions: int = 1  # messages go to crc32(object) % partitions
    codec: str = "null"  # Avro container codec
    start: dt.datetime = dt.datetime(2024, 3, 1, 9, 0, 0)  # UTC


@dataclass(frozen=True)
class TrueChange:
    time_us: int
    table: str  # "<namespace>.<table>"
    key: Key
    row: Row | None  # None: the key is deleted


@dataclass
class DatastreamStory:
    config: DatastreamConfig
    messages: list[Outgoing] = field(default_factory=list)
    initial: dict[str, dict[Key, Row]] = field(default_factory=dict)
    changes: list[TrueChange] = field(default_factory=list)  # in the true (log) order
    max_lateness_us: int = 0
    backfill_end_us: int = 0  # the last backfill read: the lake is complete only from there
    first_event_time_us: int = 0
    last_event_time_us: int = 0
    injected: dict[str, list] = field(default_factory=dict)  # feature -> [(details...)]

    def state_at(self, event_time_us: int) -> dict[str, dict[Key, Row]]:
        """Every table after the changes with source time <= `event_time_us`, in the true order."""
        state = {t: dict(rows) for t, rows in self.initial.items()}
        for ch in self.changes:
            if ch.time_us > event_time_us:
                break  # the true order is in source-time order
            if ch.row is None:
                state[ch.table].pop(ch.key, None)
            else:
                state[ch.table][ch.key] = ch.row
        return state

    def record(self, kind: str, *what: Any) -> None:
        self.injected.setdefault(kind, []).append(what)


class _Player:
    def __init__(self, config: DatastreamConfig):
        if config.fmt not in ("json", "avro"):
            raise ValueError(f"fmt {config.fmt!r} is not 'json' or 'avro'")
        self.cfg = config
        self.rng = random.Random(config.seed)
        self.story = DatastreamStory(config, max_lateness_us=config.max_lateness_ms * 1000)
        self.clock = int((config.start - dt.datetime(1970, 1, 1)).total_seconds() * 1000)
        self.rows: dict[str, dict[Key, Row]] = {t.qualified: {} for t in TABLES}
        self.next_id = {t.qualified: 1 for t in TABLES}
        self.events: list[tuple[int, dict, TableDef]] = []  # (source time ms, event, table) as produced
        self.binlog = [999_997, 4]  # file number, position
        self.redo = {"scn": 15_869_116_216_871, "seq": 0x0073C9, "block": 0x000A4E4C, "tx": 0}
        self.next_block = 0x10
        self.schemas = {t.qualified: avro_event_schema(t.source, t.columns) for t in TABLES}

    # --- values ------------------------------------------------------------------------------
    def _rowid(self) -> str:
        self.next_block += 1
        digits = lambda n, w: "".join(_B64[(n >> (6 * i)) & 63] for i in reversed(range(w)))  # noqa: E731
        return "AAAGYP" + "AAT" + digits(self.next_block // 4, 6) + digits(self.next_block % 4, 3)

    def _new_row(self, t: TableDef) -> Row:
        r = self.rng
        n = self.next_id[t.qualified]
        self.next_id[t.qualified] += 1
        if t is CUSTOMERS:
            name = r.choice(_NAMES)
            return {"id": n, "name": name, "email": None if r.random() < 0.2 else f"{name.lower()}{n}@example.com",
                    "tier": r.choice(["basic", "gold"])}
        if t is ORDERS:
            return {"region": r.choice(["eu", "us"]), "order_id": n, "customer_id": r.randint(1, 30),
                    "amount": round(r.uniform(5, 500), 2), "status": "new"}
        return {"INVOICE_ID": 1000 + n, "CUSTOMER": r.choice(_NAMES), "AMOUNT": round(r.uniform(10, 9000), 2),
                "STATUS": r.choice(["OPEN", None]), ROWID: self._rowid()}

    def _changed(self, t: TableDef, row: Row) -> Row:
        r = self.rng
        if t is CUSTOMERS:
            return {**row, "tier": r.choice(["basic", "gold", "platinum"]), "name": r.choice(_NAMES)}
        if t is ORDERS:
            return {**row, "status": r.choice(["paid", "shipped", "returned"]), "amount": round(r.uniform(5, 500), 2)}
        return {**row, "STATUS": r.choice(["PAID", "DISPUTED", None]), "AMOUNT": round(r.uniform(10, 9000), 2)}

    # --- events ------------------------------------------------------------------------------
    def _event(self, t: TableDef, family: str, change_type: str, row: Row, meta: dict, sort_keys: list) -> None:
        payload = {c: row[c] for c, _ in t.columns}
        source = t.source
        read_method = {("mysql", "cdc"): "mysql-cdc-binlog", ("mysql", "backfill"): "mysql-backfill-fulldump",
                       ("oracle", "cdc"): "oracle-cdc-logminer", ("oracle", "backfill"): "oracle-backfill"}[(source, family)]
        event = {
            "stream_name": MYSQL_STREAM if source == "mysql" else ORACLE_STREAM,
            "read_method": read_method,
            "object": t.qualified,
            "schema_key": hashlib.sha1(json.dumps(t.columns).encode()).hexdigest()[:16],
            "uuid": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            "read_timestamp": self.clock + self.rng.randint(50, 2000),
            "source_timestamp": self.clock,
            "sort_keys": [self.clock, *sort_keys],
            "source_metadata": {"database": t.namespace if source == "mysql" else "ORCL", "table": t.name,
                                "change_type": change_type, "is_deleted": change_type in ("DELETE", "UPDATE-DELETE"),
                                **meta},
            "payload": payload,
        }
        if source == "oracle":
            event["source_metadata"]["schema"] = t.namespace
        self.events.append((self.clock, event, t))

    def _truth(self, t: TableDef, key: Key, row: Row | None) -> None:
        self.story.changes.append(TrueChange(self.clock * 1000, t.qualified, key, row))
        if row is None:
            self.rows[t.qualified].pop(key, None)
        else:
            self.rows[t.qualified][key] = row

    def _binlog(self) -> dict:
        self.binlog[1] += self.rng.randint(150, 900)
        if self.binlog[1] > 9_000:  # rotate: a new file, its first row event after the header events
            self.binlog = [self.binlog[0] + 1, 4 + self.rng.randint(120, 300)]
        return {"log_file": f"mysql-bin.{self.binlog[0]:06d}", "log_position": self.binlog[1]}

    def _mysql(self, t: TableDef, change_type: str, row: Row, pos: dict) -> None:
        meta = {**pos, "primary_keys": list(t.primary_key)}
        self._event(t, "cdc", change_type, row, meta, [pos["log_file"], pos["log_position"]])
        if change_type in ("INSERT", "UPDATE-INSERT"):
            self._truth(t, t.key_of(row), row)
        else:
            self._truth(t, t.key_of(row), None)

    def _oracle(self, change_type: str, row: Row, tx_id: str) -> None:
        r, redo = self.rng, self.redo
        redo["scn"] += r.randint(1, 5000)
        if r.random() < 0.08:  # log switch: a new sequence number, blocks from the start
            redo["seq"] += 1
            redo["block"] = r.randint(2, 40)
        else:
            redo["block"] += r.randint(1, 60)
        rs_id = f"0x{redo['seq']:06x}.{redo['block']:08x}.{r.randint(0x10, 0x1f0):04x}"
        meta = {"log_file": f"/u01/oradata/ORCL/redo{redo['seq'] % 3 + 1:02d}.log", "scn": redo["scn"],
                "row_id": row[ROWID], "tx_id": tx_id, "rs_id": rs_id, "ssn": 0}
        self._event(INVOICES, "cdc", change_type, row, meta, [redo["scn"], rs_id, 0])
        self._truth(INVOICES, INVOICES.key_of(row), None if change_type == "DELETE" else row)

    def _tx_id(self) -> str:
        self.redo["tx"] += 1
        return f"{self.rng.randint(1, 12)}.{self.rng.randint(0, 33)}.{self.redo['tx'] + 4000}"

    # --- story steps -------------------------------------------------------------------------
    def _pick(self, t: TableDef) -> Row:
        rows = self.rows[t.qualified]
        return rows[self.rng.choice(sorted(rows, key=repr))]

    def mysql_step(self) -> None:
        r = self.rng
        t = r.choice([CUSTOMERS, ORDERS])
        op = r.choices(["insert", "update", "delete", "key_change", "transaction"], [4, 5, 2, 1, 1])[0]
        if op != "insert" and not self.rows[t.qualified]:
            op = "insert"
        if op == "insert":
            self._mysql(t, "INSERT", self._new_row(t), self._binlog())
        elif op == "update":
            self._mysql(t, "UPDATE-INSERT", self._changed(t, self._pick(t)), self._binlog())
        elif op == "delete":
            self._mysql(t, "DELETE", self._pick(t), self._binlog())
        elif op == "key_change":
            old = self._pick(t)
            column = "id" if t is CUSTOMERS else "order_id"
            new = {**self._changed(t, old), column: self.next_id[t.qualified]}
            self.next_id[t.qualified] += 1
            pos = self._binlog()  # one row event: both images at one position
            self._mysql(t, "UPDATE-DELETE", old, pos)
            self._mysql(t, "UPDATE-INSERT", new, pos)
            self.story.record("key_change", t.qualified, t.key_of(old), t.key_of(new))
        else:  # a transaction of a few statements, one source time
            for _ in range(r.randint(2, 4)):
                kind = r.choice(["INSERT", "UPDATE-INSERT", "DELETE"]) if self.rows[t.qualified] else "INSERT"
                row = self._new_row(t) if kind == "INSERT" else self._pick(t)
                self._mysql(t, kind, self._changed(t, row) if kind == "UPDATE-INSERT" else row, self._binlog())
            self.story.record("transaction", t.qualified, self.clock)

    def oracle_step(self) -> None:
        r = self.rng
        op = r.choices(["insert", "update", "delete", "pk_change", "rollback"], [4, 5, 2, 1, 1])[0]
        if op in ("update", "delete", "pk_change") and not self.rows[INVOICES.qualified]:
            op = "insert"
        tx = self._tx_id()
        if op == "insert":
            self._oracle("INSERT", self._new_row(INVOICES), tx)
        elif op == "update":
            self._oracle("UPDATE", self._changed(INVOICES, self._pick(INVOICES)), tx)
        elif op == "delete":
            self._oracle("DELETE", self._pick(INVOICES), tx)
        elif op == "pk_change":  # the primary key changes, the rowid stays
            old = self._pick(INVOICES)
            new = {**old, "INVOICE_ID": 1000 + self.next_id[INVOICES.qualified]}
            self.next_id[INVOICES.qualified] += 1
            self._oracle("UPDATE", new, tx)
            self.story.record("pk_change", old["INVOICE_ID"], new["INVOICE_ID"], old[ROWID])
        else:  # rolled back: LogMiner shows the INSERT, then the inverse DELETE
            row = self._new_row(INVOICES)
            self._oracle("INSERT", row, tx)
            self.clock += r.randint(1, 400)
            self._oracle("DELETE", row, tx)
            self.story.record("rollback", tx, row[ROWID])

    def backfill(self, t: TableDef, chunk: int) -> None:
        rows = [row for key, row in sorted(self.rows[t.qualified].items(), key=lambda kv: repr(kv[0]))
                if zlib.crc32(repr(key).encode()) % self.cfg.backfill_chunks == chunk]
        for row in rows:
            if t.source == "mysql":
                meta = {"log_file": None, "log_position": None, "primary_keys": list(t.primary_key)}
            else:
                meta = {"log_file": None, "scn": self.redo["scn"], "row_id": row[ROWID], "tx_id": None,
                        "rs_id": None, "ssn": None}
            self._event(t, "backfill", "INSERT", row, meta, [])
        self.story.backfill_end_us = max(self.story.backfill_end_us, self.clock * 1000)
        self.story.record("backfill", t.qualified, chunk, self.clock * 1000, len(rows))

    # --- the whole story ---------------------------------------------------------------------
    def play(self) -> DatastreamStory:
        cfg, r, story = self.cfg, self.rng, self.story
        for t in TABLES:
            for _ in range(cfg.initial_rows):
                row = self._new_row(t)
                self.rows[t.qualified][t.key_of(row)] = row
        story.initial = {name: dict(rows) for name, rows in self.rows.items()}
        reads: dict[int, list[tuple[TableDef, int]]] = {}
        for t in TABLES:
            for chunk in range(cfg.backfill_chunks):
                reads.setdefault(r.randint(0, max(1, cfg.steps // 3)), []).append((t, chunk))
        for step in range(max(cfg.steps, max(reads) + 1)):
            for t, chunk in reads.get(step, []):
                self.backfill(t, chunk)
            self.clock += r.randint(300, 6000)
            if r.random() < 0.65:
                self.mysql_step()
            else:
                self.oracle_step()
        self._deliver()
        return story

    def _encode(self, event: dict, t: TableDef, salt: str) -> bytes:
        if self.cfg.fmt == "json":
            return encode_json_event(event)
        sync = hashlib.md5((event["uuid"] + salt).encode()).digest()
        return encode_avro_events(self.schemas[t.qualified], [event], codec=self.cfg.codec, sync_marker=sync)

    def _deliver(self) -> None:
        cfg, r, story = self.cfg, self.rng, self.story
        queue: list[tuple[int, int, bytes, str, TableDef]] = []  # (arrival ms, sequence, value, note, table)
        for seq, (time_ms, event, t) in enumerate(self.events):
            arrival = time_ms + r.randrange(cfg.max_lateness_ms)
            note = f"{event['object']}:{event['read_method']}:{event['source_metadata']['change_type']}:{event['uuid'][:8]}"
            queue.append((arrival, seq, self._encode(event, t, ""), note, t))
            if r.random() < cfg.duplicate_rate:
                delay = r.randint(*cfg.duplicate_delay_ms)
                again = {**event, "read_timestamp": event["read_timestamp"] + delay}
                queue.append((arrival + delay, seq, self._encode(again, t, ":dup"), note + ":duplicate", t))
                story.record("duplicate", event["uuid"], delay)
        queue.sort(key=lambda q: (q[0], q[1]))
        for _, _, value, note, t in queue:
            part = zlib.crc32(t.qualified.encode()) % cfg.partitions
            story.messages.append(Outgoing(DATASTREAM, part, t.qualified.encode(), value, note))
        times = [time_ms for time_ms, _, _ in self.events]
        story.first_event_time_us, story.last_event_time_us = min(times) * 1000, max(times) * 1000


def build_datastream_story(config: DatastreamConfig | None = None) -> DatastreamStory:
    """Play the story of `config` (defaults if None); deterministic for a given config."""
    return _Player(config or DatastreamConfig()).play()
