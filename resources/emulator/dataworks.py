"""A DataWorks "sync to Kafka" emulator: the JSON messages a DataWorks node would write for a
MySQL-like source, plus the true state of every table at any point of the stream.

`build_dataworks_story(config)` plays a deterministic story (from `config.seed`) on one database
with two tables, in the message format of ../shared/seeds/003_*.txt:
- `orders` has a primary key (id LONG) and a column of every type: STRING, DOUBLE, BOOLEAN, DATE
  (epoch milliseconds), BYTES (Base64); part-way through, `ALTER TABLE orders ADD COLUMN note`
  (an ALTER message; later `orders` messages carry the new column, earlier rows read it as null).
- `audit_log` has no primary key (`primaryKey: null`), like the seed's `pkset_test_no_pk`; with
  `rds_row_id` it carries ApsaraDB RDS's implicit `#alibaba_rds_row_id#` column, as the seed does.
The story: a full load (INSERTs, outside transactions), then transactions of inserts, updates and
deletes, each between TRANSACTION_BEGIN and TRANSACTION_END; an update is written either as one
UPDATE_AFTER carrying before and after or as an UPDATE_BEFOR / UPDATE_AFTER pair with the same
sequenceId (a real node uses one form throughout, set by its "one Kafka record per update"
option; the story mixes them so both are exercised; a rate of 0 or 1 gives a single form).
MHEARTBEAT messages come whenever `heartbeat_every_ms` of source time have passed, also inside
a transaction, never between the two halves of an update. At-least-once delivery (DataWorks does
not deduplicate after a failover or offset reset): after a transaction, with `failover_rate`, the
last few messages are written again, re-serialized with a new systemTime (so duplicates are equal
by sequenceId and op, not by bytes); each such replay is recorded in `injected["duplicate"]`.

Ground truth, in the decoder's own order keys (`resources.codecs.dataworks.sequence_order_key`):
- `state_after(bound)`: {table: {key tuple: row}} after applying every change with
  order_key <= bound (None: nothing applied). A table's key tuple follows the decoder's rules:
  (id,) for `orders`; (`#alibaba_rds_row_id#`,) or the whole row, in column order, for
  `audit_log`. Rows hold the decoder's Python types (naive UTC datetimes, bytes, ...).
- `heartbeats`: [(event_time_us, order_key of the last row change before it, or None)].
- `transaction_ends`: [(event_time_us, order_key of the TRANSACTION_END message)].
Sequence ids look like the seed's (epoch ms of the story's start * 10^6 + a counter); event
times strictly increase from message to message (the two halves of an update share one, as in
the seed). Everything goes to partition 0 (one partition keeps the source order the heartbeats
describe); the key is the primary key's value as text, else empty, as DataWorks writes it.
Deterministic: all randomness comes from `random.Random(config.seed)`.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from dataclasses import dataclass, field

from resources.codecs.dataworks import ROW_ID_COLUMNS, sequence_order_key
from resources.emulator.outgoing import Outgoing

ROLE = "dataworks"
ORDERS, AUDIT = "orders", "audit_log"
RDS_ROW_ID = ROW_ID_COLUMNS[1]
EPOCH = dt.datetime(1970, 1, 1)
ALTER_TEXT = "ALTER TABLE `orders` ADD COLUMN `note` VARCHAR(64) NULL"

_CUSTOMERS = ["alice", "Bób", "東京商事", "café ltd", "ёлка", "ß-werk", "o'hara", ""]
_ACTORS = ["admin", "batch", "gus", "mei", "Ирина"]
_ACTIONS = ["login", "logout", "export", "grant", "revoke", "purge"]
_NOTES = [None, "gift", "rush", "fragile", "ok"]

Row = dict[str, object]


@dataclass(frozen=True)
class DataWorksConfig:
    seed: int = 42
    database: str = "shop"
    initial_rows: int = 4  # full-load INSERTs per table
    transactions: int = 40
    max_ops_per_transaction: int = 4
    combined_update_rate: float = 0.5  # an update as one UPDATE_AFTER with before and after
    heartbeat_every_ms: int = 15_000
    failover_rate: float = 0.15  # after a transaction: re-send the last 1..8 messages
    alter_at: int | None = 15  # ALTER TABLE orders ADD COLUMN note before this transaction
    rds_row_id: bool = False  # audit_log carries #alibaba_rds_row_id# (else: whole-row key)
    start: dt.datetime = dt.datetime(2024, 5, 8, 7, 0, 0)


@dataclass
class DataWorksStory:
    config: DataWorksConfig
    messages: list[Outgoing] = field(default_factory=list)
    heartbeats: list[tuple[int, tuple | None]] = field(default_factory=list)
    transaction_ends: list[tuple[int, tuple]] = field(default_factory=list)
    injected: dict[str, list] = field(default_factory=dict)
    # (order_key, action, table, key, row or column): every change of the truth, in order
    log: list[tuple] = field(default_factory=list)

    def state_after(self, bound: tuple | None) -> dict[str, dict[tuple, Row]]:
        """Every table's rows after applying every change with order_key <= bound."""
        state: dict[str, dict[tuple, Row]] = {ORDERS: {}, AUDIT: {}}
        if bound is None:
            return state
        for order_key, action, table, key, what in self.log:
            if order_key > bound:
                break
            rows = state[table]
            if action == "upsert":
                rows[key] = dict(what)
            elif action == "delete":
                rows.pop(key, None)
            else:  # add_column: existing rows read the new column as null
                state[table] = {k: {**r, what: None} for k, r in rows.items()}
        return state


class _Sync:
    """The DataWorks node: owns the clock, the sequence counter and the messages."""

    def __init__(self, story: DataWorksStory, rng: random.Random):
        self.story, self.cfg, self.rng = story, story.config, rng
        start_ms = int((self.cfg.start - EPOCH).total_seconds() * 1000)
        self.now_ms = start_ms
        self.seq_base, self.seq_n = start_ms * 1_000_000, 0
        self.last_heartbeat_ms = start_ms
        self.last_change_key: tuple | None = None
        self.docs: list[dict] = []  # the JSON of each message, for failover re-sends
        self.columns: dict[str, list[tuple[str, str]]] = {
            ORDERS: [("id", "LONG"), ("customer", "STRING"), ("amount", "DOUBLE"), ("paid", "BOOLEAN"),
                     ("created", "DATE"), ("receipt", "BYTES")],
            AUDIT: [("actor", "STRING"), ("action", "STRING"), ("at", "DATE"), ("payload", "BYTES")]
                   + ([(RDS_ROW_ID, "LONG")] if self.cfg.rds_row_id else []),
        }
        self.primary_key = {ORDERS: ["id"], AUDIT: None}
        self.rows: dict[str, dict[tuple, Row]] = {ORDERS: {}, AUDIT: {}}
        self.next_id = {ORDERS: 1, AUDIT: 1}

    # --- time, ids, keys ------------------------------------------------------------------------

    def tick(self) -> int:
        self.maybe_heartbeat()
        self.now_ms += self.rng.randint(1, 4000)
        return self.now_ms

    def maybe_heartbeat(self) -> None:
        if self.now_ms - self.last_heartbeat_ms < self.cfg.heartbeat_every_ms:
            return
        self.now_ms += 1
        self.last_heartbeat_ms = self.now_ms
        self.emit(self.envelope(None, None, None, None, "MHEARTBEAT", self.now_ms, heartbeat=True), b"", "MHEARTBEAT")
        self.story.heartbeats.append((self.now_ms * 1000, self.last_change_key))

    def next_sequence(self) -> str:
        self.seq_n += 1
        return str(self.seq_base + self.seq_n)

    def key_of(self, table: str, row: Row) -> tuple:
        names = [n for n, _ in self.columns[table]]
        pk = self.primary_key[table] or ([RDS_ROW_ID] if RDS_ROW_ID in names else names)
        return tuple(row[c] for c in pk)

    # --- messages -------------------------------------------------------------------------------

    def envelope(self, table: str | None, before: Row | None, after: Row | None, seq: str | None, op: str,
                 event_ms: int, *, heartbeat: bool = False, ddl: str | None = None) -> dict:
        """One message in the seed's field order."""
        if heartbeat:
            schema = {"dataColumn": None, "primaryKey": None, "source": None}
            timestamp = {"eventTime": event_ms, "checkpointTime": event_ms}
        else:
            cols = self.columns[table] if table else None
            schema = {
                "dataColumn": [{"name": n, "type": t} for n, t in cols] if cols else None,
                "primaryKey": self.primary_key[table] if table else None,
                "source": {"dbType": "MySQL", "dbName": self.cfg.database, "tableName": table},
            }
            timestamp = {"eventTime": event_ms, "systemTime": event_ms + self.rng.randint(50, 1500),
                         "checkpointTime": event_ms}
        return {
            "schema": schema,
            "payload": {
                "before": None if before is None else {"dataColumn": self.wire_row(table, before)},
                "after": None if after is None else {"dataColumn": self.wire_row(table, after)},
                "sequenceId": seq,
                "timestamp": timestamp,
                "op": op,
                "ddl": None if ddl is None else {"text": ddl, "ddlMeta": base64.b64encode(ddl.encode()).decode()},
            },
            "version": "0.0.1",
        }

    def wire_row(self, table: str, row: Row) -> dict:
        out = {}
        for name, typ in self.columns[table]:
            v = row[name]
            if v is not None and typ == "DATE":
                v = (v - EPOCH) // dt.timedelta(milliseconds=1)
            elif v is not None and typ == "BYTES":
                v = base64.b64encode(v).decode("ascii")
            out[name] = v
        return out

    def emit(self, doc: dict, key: bytes, note: str) -> None:
        self.docs.append(doc)
        value = json.dumps(doc, ensure_ascii=False).encode("utf-8")
        self.story.messages.append(Outgoing(ROLE, 0, key, value, note))

    def row_key_bytes(self, table: str, row: Row) -> bytes:
        pk = self.primary_key[table]
        return ",".join(str(row[c]) for c in pk).encode() if pk else b""

    def record(self, order_key: tuple, action: str, table: str, key: tuple, what) -> None:
        self.story.log.append((order_key, action, table, key, what))
        if action in ("upsert", "delete"):
            self.last_change_key = order_key

    # --- operations -----------------------------------------------------------------------------

    def insert(self, table: str, row: Row) -> None:
        seq, t = self.next_sequence(), self.tick()
        key = self.key_of(table, row)
        self.rows[table][key] = row
        self.emit(self.envelope(table, None, row, seq, "INSERT", t), self.row_key_bytes(table, row),
                  f"{table}:INSERT:{seq}")
        self.record(sequence_order_key(seq), "upsert", table, key, row)

    def delete(self, table: str, key: tuple) -> None:
        seq, t = self.next_sequence(), self.tick()
        row = self.rows[table].pop(key)
        self.emit(self.envelope(table, row, None, seq, "DELETE", t), self.row_key_bytes(table, row),
                  f"{table}:DELETE:{seq}")
        self.record(sequence_order_key(seq), "delete", table, key, None)

    def update(self, table: str, key: tuple, new: Row) -> None:
        seq, t = self.next_sequence(), self.tick()
        old = self.rows[table].pop(key)
        new_key = self.key_of(table, new)
        self.rows[table][new_key] = new
        kb = self.row_key_bytes(table, new)
        if self.rng.random() < self.cfg.combined_update_rate:
            self.emit(self.envelope(table, old, new, seq, "UPDATE_AFTER", t), kb, f"{table}:UPDATE_AFTER+before:{seq}")
        else:
            self.emit(self.envelope(table, old, None, seq, "UPDATE_BEFOR", t), kb, f"{table}:UPDATE_BEFOR:{seq}")
            self.emit(self.envelope(table, None, new, seq, "UPDATE_AFTER", t), kb, f"{table}:UPDATE_AFTER:{seq}")
        if new_key != key:  # a whole-row key: the old row is gone, the new one is another row
            self.record(sequence_order_key(seq, old_image=True), "delete", table, key, None)
        self.record(sequence_order_key(seq), "upsert", table, new_key, new)

    def mark(self, op: str) -> tuple:
        seq, t = self.next_sequence(), self.tick()
        self.emit(self.envelope(None, None, None, seq, op, t), b"", f"{op}:{seq}")
        if op == "TRANSACTION_END":
            self.story.transaction_ends.append((t * 1000, sequence_order_key(seq)))
        return sequence_order_key(seq)

    def alter_add_note(self) -> None:
        seq, t = self.next_sequence(), self.tick()
        self.columns[ORDERS] = self.columns[ORDERS] + [("note", "STRING")]
        self.rows[ORDERS] = {k: {**r, "note": None} for k, r in self.rows[ORDERS].items()}
        self.emit(self.envelope(ORDERS, None, None, seq, "ALTER", t, ddl=ALTER_TEXT), b"", f"ALTER:{seq}")
        self.record(sequence_order_key(seq), "add_column", ORDERS, (), "note")

    def failover(self) -> None:
        """Re-send the last 1..8 messages, as a node restarted from an earlier checkpoint would."""
        k = min(len(self.docs), self.rng.randint(1, 8))
        first = len(self.docs) - k
        for doc, msg in list(zip(self.docs[first:], self.story.messages[first:])):
            ts = doc["payload"]["timestamp"]
            if "systemTime" in ts:
                doc = json.loads(json.dumps(doc))
                doc["payload"]["timestamp"]["systemTime"] = ts["systemTime"] + self.rng.randint(60_000, 120_000)
            self.emit(doc, msg.key, msg.note + " (re-sent)")
        self.story.injected.setdefault("duplicate", []).append((first, k))

    # --- random rows ----------------------------------------------------------------------------

    def random_datetime(self) -> dt.datetime:
        return EPOCH + dt.timedelta(milliseconds=self.now_ms - self.rng.randint(0, 10**10))

    def new_order(self) -> Row:
        rng = self.rng
        row: Row = {"id": self.next_id[ORDERS], "customer": rng.choice(_CUSTOMERS),
                    "amount": round(rng.uniform(0, 5000), 2), "paid": rng.random() < 0.5,
                    "created": self.random_datetime(),
                    "receipt": None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 24))}
        self.next_id[ORDERS] += 1
        if any(n == "note" for n, _ in self.columns[ORDERS]):
            row["note"] = rng.choice(_NOTES)
        return row

    def changed_order(self, row: Row) -> Row:
        rng = self.rng
        new = {**row, "amount": round(rng.uniform(0, 5000), 2), "paid": not row["paid"]}
        if rng.random() < 0.3:
            new["customer"] = rng.choice(_CUSTOMERS)
        if "note" in new:
            new["note"] = rng.choice(_NOTES)
        return new

    def audit_row(self, base: Row | None = None) -> Row:
        """A new audit row (or a change of `base`) whose key is not taken by another row."""
        rng = self.rng
        for _ in range(1000):
            row: Row = dict(base) if base else {"actor": rng.choice(_ACTORS)}
            row.update({"action": rng.choice(_ACTIONS), "at": self.random_datetime(),
                        "payload": None if rng.random() < 0.25 else rng.randbytes(rng.randint(1, 16))})
            if self.cfg.rds_row_id and base is None:
                row[RDS_ROW_ID] = self.next_id[AUDIT]
            key = self.key_of(AUDIT, row)
            if key not in self.rows[AUDIT] or (base is not None and key == self.key_of(AUDIT, base)):
                if base is None and self.cfg.rds_row_id:
                    self.next_id[AUDIT] += 1
                return row
        raise RuntimeError("could not draw a distinct audit row")  # pragma: no cover

    def random_op(self) -> None:
        rng = self.rng
        table = rng.choice([ORDERS, AUDIT])
        rows = self.rows[table]
        what = rng.choices(["insert", "update", "delete"], weights=[5, 4, 2])[0] if rows else "insert"
        if what == "insert":
            self.insert(table, self.new_order() if table == ORDERS else self.audit_row())
            return
        key = rng.choice(sorted(rows, key=repr))
        if what == "delete":
            self.delete(table, key)
        elif table == ORDERS:
            self.update(table, key, self.changed_order(rows[key]))
        else:
            self.update(table, key, self.audit_row(rows[key]))


def build_dataworks_story(config: DataWorksConfig | None = None) -> DataWorksStory:
    """Play the story of `config`; deterministic for a given config."""
    config = config or DataWorksConfig()
    story = DataWorksStory(config)
    sync = _Sync(story, random.Random(config.seed))
    for table in (ORDERS, AUDIT):  # full load
        for _ in range(config.initial_rows):
            sync.insert(table, sync.new_order() if table == ORDERS else sync.audit_row())
    for n in range(config.transactions):
        if config.alter_at is not None and n == config.alter_at:
            sync.alter_add_note()
        sync.mark("TRANSACTION_BEGIN")
        for _ in range(sync.rng.randint(1, config.max_ops_per_transaction)):
            sync.random_op()
        sync.mark("TRANSACTION_END")
        if sync.rng.random() < config.failover_rate:
            sync.failover()
    sync.now_ms += config.heartbeat_every_ms  # a last heartbeat closes the story
    sync.maybe_heartbeat()
    return story
