"""Debezium emulator: the messages a PostgreSQL (or MySQL) connector with transaction metadata
would put on one routed topic, and the truth.

`build_debezium_story(config)` plays a deterministic story (from `config.seed`) on a database
`shop` with tables `customers` (key `id`: name, balance decimal(10,2), born date; later `email`)
and `orders` (key `id`: customer_id, amount double, placed timestamp):
- the initial snapshot: one `op=r` read per existing row, outside any transaction;
- transactions, each BEGIN, its changes, END (the connector's transaction events routed into the
  same topic): inserts `c`, updates `u` with the full before image (REPLICA IDENTITY FULL / a
  MySQL full row image), deletes `d` each followed by its tombstone; every transaction after the
  first touches both tables at least once when `cross_table` says so (here: every third);
- a schema change at transaction `alter_at`: `customers` gains `email`, and the value schema of
  every later customers event has the field;
- a connector restart after transaction `restart_at`: the last `resend` messages are sent again
  (same bytes: offsets the connector had not committed), BEGIN/END included.
Wire: "json" (the JSON converter with schemas: `schema` + `payload`, typed values) or
"schemaless" (payload alone: decimals as text, dates as days, timestamps as microseconds, as a
connector with decimal.handling.mode=string writes them).
Truth: `state_after(bound)`: every change with (position, total_order) <= bound applied in log
order, `{table: {key tuple: row}}`, rows as the codec decodes them for the chosen wire.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from resources.emulator.outgoing import Outgoing

DEBEZIUM = "debezium"
EPOCH = dt.datetime(1970, 1, 1)
_NAMES = ["Ada", "Brice", "Chloé", "Dmitri", "Eun-ji", "Farid", "Grete", "Hugo", "Inès", "Jonas"]
_DECIMAL = {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
            "parameters": {"scale": "2", "connect.decimal.precision": "10"}}
COLUMNS = {
    "customers": [("id", {"type": "int64", "optional": False}), ("name", {"type": "string", "optional": True}),
                  ("balance", _DECIMAL), ("born", {"type": "int32", "optional": True, "name": "io.debezium.time.Date"})],
    "orders": [("id", {"type": "int64", "optional": False}), ("customer_id", {"type": "int64", "optional": True}),
               ("amount", {"type": "float64", "optional": True}),
               ("placed", {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"})],
}
EMAIL = ("email", {"type": "string", "optional": True})


@dataclass(frozen=True)
class DebeziumConfig:
    seed: int = 7
    transactions: int = 30
    wire: str = "json"  # "json" (schema + payload) | "schemaless"
    connector: str = "postgresql"  # | "mysql"
    server: str = "pg"
    initial_rows: int = 4
    alter_at: int = 10
    restart_at: int = 18
    resend: int = 7
    start_us: int = 1_700_000_000_000_000


@dataclass
class DebeziumStory:
    config: DebeziumConfig
    messages: list[Outgoing] = field(default_factory=list)
    log: list[tuple[tuple, str, tuple, dict | None]] = field(default_factory=list)  # (bound, table, key, row)
    injected: dict[str, list] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return "public" if self.config.connector == "postgresql" else "shop"

    def state_after(self, bound: tuple) -> dict[str, dict[tuple, dict]]:
        state: dict[str, dict[tuple, dict]] = {t: {} for t in COLUMNS}
        for at, table, key, row in self.log:
            if at > bound:
                break
            if row is None:
                state[table].pop(key, None)
            else:
                state[table][key] = row
        return state

    def final_state(self) -> dict[str, dict[tuple, dict]]:
        return self.state_after(self.log[-1][0])


class _Player:
    def __init__(self, cfg: DebeziumConfig):
        self.cfg, self.rng = cfg, random.Random(cfg.seed)
        self.story = DebeziumStory(cfg)
        self.rows: dict[str, dict[int, dict]] = {t: {} for t in COLUMNS}
        self.next_id = {t: 1 for t in COLUMNS}
        self.email = False
        self.lsn, self.file, self.pos, self.txid = 10_000, 999_999, 4, 700
        self.now_us = cfg.start_us

    # ------------------------------------------------------------------ rows and wire values
    def columns(self, table: str) -> list[tuple[str, dict]]:
        return COLUMNS[table] + ([EMAIL] if table == "customers" and self.email else [])

    def new_row(self, table: str) -> dict:
        i = self.next_id[table]
        self.next_id[table] += 1
        if table == "customers":
            row = {"id": i, "name": self.rng.choice(_NAMES), "balance": Decimal(self.rng.randint(-99999, 99999)) / 100,
                   "born": dt.date(1950, 1, 1) + dt.timedelta(days=self.rng.randint(0, 20000))}
            if self.email:
                row["email"] = f"c{i}@example.org"
            return row
        return {"id": i, "customer_id": self.rng.randint(1, 9), "amount": self.rng.randint(100, 99999) / 100,
                "placed": EPOCH + dt.timedelta(microseconds=self.now_us + self.rng.randint(0, 999))}

    def wire_value(self, value: Any, schema: dict) -> Any:
        name = schema.get("name", "")
        if value is None:
            return None
        if name.endswith("Decimal"):
            if self.cfg.wire != "json":
                return str(value)
            unscaled = int(value.scaleb(2))
            return base64.b64encode(unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)).decode()
        if name.endswith("time.Date"):
            return (value - dt.date(1970, 1, 1)).days
        if name.endswith("MicroTimestamp"):
            return (value - EPOCH) // dt.timedelta(microseconds=1)
        return value

    def truth_row(self, table: str, row: dict) -> dict:
        """The row as the codec decodes it: typed with schemas, JSON values without."""
        if self.cfg.wire == "json":
            return dict(row)
        return {c: self.wire_value(row.get(c), s) for c, s in self.columns(table) if c in row}

    # ------------------------------------------------------------------ envelopes
    def schema_of(self, table: str) -> dict:
        ns = f"{self.cfg.server}.{self.story.namespace}.{table}"
        value = {"type": "struct", "optional": True, "name": f"{ns}.Value",
                 "fields": [{**s, "field": c} for c, s in self.columns(table)]}
        return {"type": "struct", "optional": False, "name": f"{ns}.Envelope", "fields": [
            {**value, "field": "before"}, {**value, "field": "after"},
            {"type": "struct", "optional": False, "name": "io.debezium.connector.source", "field": "source",
             "fields": []},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "struct", "optional": True, "field": "transaction", "fields": []}]}

    def wrap(self, payload: Any, schema: dict) -> bytes:
        doc = {"schema": schema, "payload": payload} if self.cfg.wire == "json" else payload
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()

    def source(self, table: str, snapshot: str, row_no: int) -> dict:
        ms = self.now_us // 1000
        src = {"version": "2.5.0.Final", "connector": self.cfg.connector, "name": self.cfg.server, "ts_ms": ms,
               "snapshot": snapshot, "db": "shop", "table": table}
        if self.cfg.connector == "postgresql":
            src.update(schema="public", txId=self.txid, lsn=self.lsn, xmin=None)
        else:
            src.update(server_id=1, file=f"mysql-bin.{self.file:06d}", pos=self.pos, row=row_no, thread=7)
        return src

    def position(self, row_no: int) -> tuple:
        if self.cfg.connector == "postgresql":
            return (self.lsn,)
        return (self.file, f"mysql-bin.{self.file:06d}", self.pos, row_no)

    def send(self, table: str, op: str, before: dict | None, after: dict | None, txn: dict | None, row_no: int,
             snapshot: str = "false") -> None:
        cols = dict(self.columns(table))
        image = lambda r: None if r is None else {c: self.wire_value(r.get(c), cols[c]) for c in cols}  # noqa: E731
        row = after if after is not None else before
        key_schema = {"type": "struct", "optional": False, "name": f"{self.cfg.server}.{table}.Key",
                      "fields": [{"type": "int64", "optional": False, "field": "id"}]}
        key = self.wrap({"id": row["id"]}, key_schema)
        payload = {"before": image(before), "after": image(after), "source": self.source(table, snapshot, row_no),
                   "op": op, "ts_ms": self.now_us // 1000 + 5, "transaction": txn}
        self.story.messages.append(Outgoing(DEBEZIUM, 0, key, self.wrap(payload, self.schema_of(table)),
                                            f"{op}:{table}:{row['id']}"))
        bound = (self.position(row_no), (txn or {}).get("total_order", 0))
        self.story.log.append((bound, table, (row["id"],), None if after is None else self.truth_row(table, after)))
        if op == "d":
            self.story.messages.append(Outgoing(DEBEZIUM, 0, key, None, f"tombstone:{table}:{row['id']}"))

    def txn_event(self, status: str, txn_id: str, counts: dict[str, int]) -> None:
        value = {"status": status, "id": txn_id, "ts_ms": self.now_us // 1000,
                 "event_count": sum(counts.values()) if status == "END" else None,
                 "data_collections": [{"data_collection": f"{self.story.namespace}.{t}", "event_count": n}
                                      for t, n in counts.items()] if status == "END" else None}
        schema = {"type": "struct", "name": "io.debezium.connector.common.TransactionMetadataValue", "fields": []}
        key = self.wrap({"id": txn_id}, {"type": "struct", "name": "io.debezium.connector.common.TransactionMetadataKey",
                                         "fields": [{"type": "string", "optional": False, "field": "id"}]})
        self.story.messages.append(Outgoing(DEBEZIUM, 0, key, self.wrap(value, schema), f"{status}:{txn_id}"))

    # ------------------------------------------------------------------ the story
    def snapshot(self) -> None:
        for table in COLUMNS:
            for _ in range(self.cfg.initial_rows):
                row = self.new_row(table)
                self.rows[table][row["id"]] = row
        last = [(t, i) for t in COLUMNS for i in self.rows[t]][-1]
        for table in COLUMNS:
            for i, row in self.rows[table].items():
                self.now_us += 1000
                self.send(table, "r", None, row, None, 0, "last" if (table, i) == last else "true")

    def transaction(self, n: int) -> None:
        if n == self.cfg.alter_at:
            self.email = True
            self.story.injected.setdefault("schema_change", []).append(n)
        self.now_us += self.rng.randint(200_000, 3_000_000)
        self.txid += self.rng.randint(1, 5)
        self.lsn += 1000
        if self.cfg.connector == "mysql":
            self.pos += 800
            if self.pos > 5000:  # rotate the binlog: mysql-bin.999999 -> mysql-bin.1000000
                self.file, self.pos = self.file + 1, 4
        txn_id = f"{self.txid}:{self.lsn}" if self.cfg.connector == "postgresql" else f"3e11fa47:{self.txid}"
        self.txn_event("BEGIN", txn_id, {})
        tables = list(COLUMNS) if n % 3 == 0 else [self.rng.choice(list(COLUMNS))]
        counts: dict[str, int] = {}
        order = 0
        for table in tables:
            for _ in range(self.rng.randint(1, 3)):
                order += 1
                counts[table] = counts.get(table, 0) + 1
                counts_in = {"id": txn_id, "total_order": order, "data_collection_order": counts[table]}
                self.lsn += self.rng.randint(40, 200)
                self.change(table, counts_in, order)
        self.txn_event("END", txn_id, counts)

    def change(self, table: str, txn: dict, row_no: int) -> None:
        live = self.rows[table]
        pick = self.rng.random()
        if not live or pick < 0.45:
            row = self.new_row(table)
            live[row["id"]] = row
            self.send(table, "c", None, row, txn, row_no)
        elif pick < 0.8:
            old = live[self.rng.choice(sorted(live))]
            new = dict(old)
            if table == "customers":
                new["balance"] = Decimal(self.rng.randint(-99999, 99999)) / 100
                if self.email:
                    new["email"] = f"{new['name'].lower()}{new['id']}@example.org"
            else:
                new["amount"] = self.rng.randint(100, 99999) / 100
            live[new["id"]] = new
            self.send(table, "u", old, new, txn, row_no)
            self.story.injected.setdefault("update_with_before", []).append(new["id"])
        else:
            old = live.pop(self.rng.choice(sorted(live)))
            self.send(table, "d", old, None, txn, row_no)
            self.story.injected.setdefault("delete_and_tombstone", []).append(old["id"])

    def play(self) -> DebeziumStory:
        self.snapshot()
        for n in range(1, self.cfg.transactions + 1):
            self.transaction(n)
            if n % 3 == 0:
                self.story.injected.setdefault("cross_table_transaction", []).append(n)
            if n == self.cfg.restart_at:
                again = self.story.messages[-self.cfg.resend:]
                self.story.messages.extend(again)
                self.story.injected["restart_duplicates"] = [m.note for m in again]
        return self.story


def build_debezium_story(config: DebeziumConfig | None = None) -> DebeziumStory:
    return _Player(config or DebeziumConfig()).play()
