"""A Qlik Replicate task writing to a Kafka target, emulated: its messages and the true table states.

`build_qlik_story(config)` plays a deterministic story (from `config.seed`) on two source tables of
one schema and returns every message in production order (bytes ready for Kafka, role "qlik",
one partition: Qlik orders by changeSequence across all tables, one partition keeps that order)
plus the truth the lake is compared with:
- `state_after(order_key)`: every table's rows after applying every change with an order key
  <= the bound, in order (order keys as `resources.codecs.qlik.order_key` computes them);
- `transaction_ends`: the order key of each transaction's last change (transactionLastEvent).

The story, as seeds/002 describes the messages:
1. A metadata message per table (tableVersion 1): CUSTOMERS (key ID) and ORDER_LINES, whose key
   is composite and in another order than the columns (ORDER_ID position 1 at ordinal 2, LINE_NO
   position 2 at ordinal 1), with a LOB column NOTE (CLOB).
2. Full load: REFRESH rows of both tables (no changeSequence, masks or transaction: CDC only).
3. Transactions of INSERT / UPDATE (with beforeData) / DELETE; changeSequence YYYYMMDDHHmmSShh +
   19-digit change number, increasing; transactionEventCounter 1..n; transactionLastEvent on the
   last. Masks are hex, least significant byte first: INSERT sets every inserted column in
   changeMask, UPDATE the changed ones, DELETE the key; LOB columns are never in changeMask.
4. Before transaction `ddl_at_transaction`: ALTER TABLE CUSTOMERS ADD EMAIL -> a new metadata
   message with tableVersion 2 and a new schemaId; existing rows read EMAIL NULL from then on.

Quirks, recorded in `QlikStory.injected`:
- "duplicate": a message delivered again 0..2 messages later (at-least-once);
- "rollback": a transaction rolled back, shown as its DML followed by the inverse DML (net zero);
- "uncaptured": an UPDATE logged minimally (Oracle without full supplemental logging): only the
  key and the changed columns are captured, the others have columnMask bit 0 and a JSON null that
  is *not* a value; and ORDER_LINES updates that leave the LOB NOTE uncaptured;
- "ddl": the table version change.

Formats (`config.format`): "json" (the seed's bare messages), "json-envelope" (Replicate's
`{"magic": "atMSG", "type": "MD"|"DT", ..., "message": {...}}`), "avro" (one Avro container file
per message, records with the JSON form's fields), "avro-envelope" (Replicate's binary envelope:
metadata with its schema embedded, data by `messageSchemaId` = the metadata's schemaId). JSON
values are written as strings, as Replicate's JSON does ("ID": "2").
Deterministic: all randomness comes from one `random.Random(config.seed)`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import random
from dataclasses import dataclass, field
from decimal import Decimal

import fastavro

from resources.codecs.qlik import ENVELOPE_SCHEMA, MAGIC
from resources.codecs.qlik_values import encode_mask, order_key, row_identity
from resources.emulator.outgoing import Outgoing

QLIK = "qlik"
FORMATS = ("json", "json-envelope", "avro", "avro-envelope")

Row = dict[str, object]

# The Avro schema of a metadata message in the Avro forms (the seed gives the fields, not a schema).
METADATA_SCHEMA = {
    "type": "record", "name": "MetadataMessage", "namespace": "deltaport.emulator.qlik", "fields": [
        {"name": "schemaId", "type": "string"},
        {"name": "lineage", "type": {"type": "record", "name": "Lineage", "fields": [
            {"name": "server", "type": "string"}, {"name": "task", "type": "string"},
            {"name": "schema", "type": "string"}, {"name": "table", "type": "string"},
            {"name": "tableVersion", "type": "int"}, {"name": "timestamp", "type": "string"},
        ]}},
        {"name": "tableStructure", "type": {"type": "record", "name": "TableStructure", "fields": [
            {"name": "tableColumns", "type": {"type": "map", "values": {"type": "record", "name": "ColumnInfo", "fields": [
                {"name": "ordinal", "type": "int"}, {"name": "type", "type": "string"},
                {"name": "length", "type": "int"}, {"name": "precision", "type": "int"},
                {"name": "scale", "type": "int"}, {"name": "primaryKeyPosition", "type": "int"},
            ]}}},
        ]}},
        {"name": "dataSchema", "type": "string"},
    ],
}
_METADATA = fastavro.parse_schema(METADATA_SCHEMA)
_ENVELOPE = fastavro.parse_schema(ENVELOPE_SCHEMA)


@dataclass(frozen=True)
class QlikConfig:
    seed: int = 42
    transactions: int = 24
    refresh_rows: int = 6  # full-load rows per table
    format: str = "json"
    duplicate_rate: float = 0.1
    ddl_at_transaction: int | None = 10  # before this transaction: CUSTOMERS gains EMAIL
    rollback_at_transaction: int | None = 5  # this transaction is rolled back (inverse DML)
    uncaptured_rate: float = 0.3  # chance an UPDATE is logged minimally (the first per table always is)
    external_schema_id: bool = True  # headers.externalSchemaId on data messages
    schema: str = "SALES"
    task: str = "deltaport-emulated-task"
    server: str = "qlik-emulator"
    start: dt.datetime = dt.datetime(2024, 3, 1, 9, 0, 0)


@dataclass(frozen=True)
class _Col:
    name: str
    type: str
    length: int = 0
    precision: int = 0
    scale: int = 0
    key: int = 0  # primaryKeyPosition
    lob: bool = False


_CUSTOMERS = (
    _Col("ID", "INT4", 4, 10, 0, key=1), _Col("NAME", "WSTRING", 50), _Col("CITY", "STRING", 30),
    _Col("BALANCE", "NUMERIC", 0, 12, 2), _Col("UPDATED", "DATETIME", 8, 26, 6),
)
_EMAIL = _Col("EMAIL", "STRING", 80)
_ORDER_LINES = (
    _Col("LINE_NO", "INT2", 2, 5, 0, key=2), _Col("ORDER_ID", "INT8", 8, 19, 0, key=1),
    _Col("PRODUCT", "STRING", 40), _Col("QTY", "INT4", 4, 10, 0), _Col("PRICE", "REAL8", 8, 15, 0),
    _Col("NOTE", "CLOB", lob=True),
)
_WORDS = ["Покупка", "акции", "café", "naïve", "東京", "ß", "store", "sale", "ёлка", "O'Brien", 'say "hi"']
_CITIES = ["Москва", "Berlin", "São Paulo", "Zürich", None]
_PRODUCTS = ["tea", "coffee", "чай", "pão", "widget"]


@dataclass
class _Table:
    name: str
    columns: tuple[_Col, ...]
    version: int = 1
    schema_id: str = ""
    data_schema: dict = field(default_factory=dict)
    rows: dict[tuple, Row] = field(default_factory=dict)
    next_id: int = 1

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in sorted((c for c in self.columns if c.key), key=lambda c: c.key))

    def key_of(self, row: Row) -> tuple:
        return tuple(row[k] for k in self.key_columns)


@dataclass
class _Op:
    table: _Table
    kind: str  # INSERT, UPDATE, DELETE
    before: Row | None
    after: Row | None
    captured: frozenset[str]
    changed: frozenset[str]


@dataclass
class QlikStory:
    config: QlikConfig
    messages: list[Outgoing] = field(default_factory=list)
    transaction_ends: list[tuple] = field(default_factory=list)
    injected: dict[str, list] = field(default_factory=dict)
    # The truth, in production order: ("row", order_key, table, key, row | None) and
    # ("add_column", order_key of the first change after the DDL, table, column).
    log: list[tuple] = field(default_factory=list)
    tables: tuple[str, ...] = ("CUSTOMERS", "ORDER_LINES")

    def record(self, kind: str, *what) -> None:
        self.injected.setdefault(kind, []).append(what)

    def state_after(self, bound: tuple) -> dict[str, dict[tuple, Row]]:
        """Every table's rows after every change with order_key <= bound, applied in order."""
        state: dict[str, dict[tuple, Row]] = {t: {} for t in self.tables}
        for entry in self.log:
            if entry[1] > bound:
                continue
            if entry[0] == "row":
                _, _, table, key, row = entry
                if row is None:
                    state[table].pop(key, None)
                else:
                    state[table][key] = dict(row)
            else:
                _, _, table, column = entry
                state[table] = {k: {**r, column: None} for k, r in state[table].items()}
        return state

    def final_state(self) -> dict[str, dict[tuple, Row]]:
        return self.state_after(max(e[1] for e in self.log))


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------


def _avro_type(col: _Col) -> object:
    if col.type in ("INT1", "INT2", "INT4", "UINT1", "UINT2"):
        return "int"
    if col.type in ("INT8", "UINT4", "UINT8"):
        return "long"
    if col.type == "REAL4":
        return "float"
    if col.type == "REAL8":
        return "double"
    if col.type == "NUMERIC":
        return {"type": "bytes", "logicalType": "decimal", "precision": col.precision, "scale": col.scale}
    if col.type == "DATETIME":
        return {"type": "long", "logicalType": "timestamp-micros"}
    if col.type == "DATE":
        return {"type": "int", "logicalType": "date"}
    if col.type == "BOOLEAN":
        return "boolean"
    if col.type in ("BYTES", "BLOB"):
        return "bytes"
    return "string"


def data_schema(schema: str, table: str, columns: tuple[_Col, ...]) -> dict:
    """The Avro schema of a data message of this table version (the metadata's dataSchema)."""
    ns = f"deltaport.emulator.qlik.{schema}.{table}"
    return {
        "type": "record", "name": "DataRecord", "namespace": ns, "fields": [
            {"name": "schema", "type": ["null", "string"]},
            {"name": "table", "type": "string"},
            {"name": "headers", "type": {"type": "record", "name": "Headers", "fields": [
                {"name": "operation", "type": {"type": "enum", "name": "Operation",
                                               "symbols": ["REFRESH", "INSERT", "UPDATE", "DELETE"]}},
                {"name": "changeSequence", "type": "string"}, {"name": "timestamp", "type": "string"},
                {"name": "streamPosition", "type": "string"}, {"name": "transactionId", "type": "string"},
                {"name": "changeMask", "type": ["null", "string"]}, {"name": "columnMask", "type": ["null", "string"]},
                {"name": "transactionEventCounter", "type": ["null", "long"]},
                {"name": "transactionLastEvent", "type": ["null", "boolean"]},
                {"name": "externalSchemaId", "type": ["null", "string"]},
            ]}},
            {"name": "data", "type": {"type": "record", "name": "Data", "fields": [
                {"name": c.name, "type": ["null", _avro_type(c)]} for c in columns
            ]}},
            {"name": "beforeData", "type": ["null", "Data"]},
        ],
    }


def _json_value(value: object) -> object:
    """Replicate's JSON writes values as text ("ID": "2")."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(value)


class _Encoder:
    def __init__(self, cfg: QlikConfig):
        # Its own random source, so every format tells the same story for the same seed.
        self.cfg, self.rng = cfg, random.Random(f"sync:{cfg.seed}")
        if cfg.format not in FORMATS:
            raise ValueError(f"format {cfg.format!r} is none of {FORMATS}")

    def encode(self, kind: str, body: dict, avro_schema: dict, schema_id: str | None) -> bytes:
        fmt = self.cfg.format
        if fmt == "json":
            return json.dumps(self._jsonable(kind, body), ensure_ascii=False).encode()
        if fmt == "json-envelope":
            env = {"magic": MAGIC.decode(), "type": kind, "headers": None, "messageSchemaId": None,
                   "messageSchema": None, "message": self._jsonable(kind, body)}
            return json.dumps(env, ensure_ascii=False).encode()
        parsed = _METADATA if kind == "MD" else fastavro.parse_schema(avro_schema)
        if fmt == "avro":
            buf = io.BytesIO()
            fastavro.writer(buf, parsed, [body], sync_marker=self.rng.randbytes(16))
            return buf.getvalue()
        inner = io.BytesIO()
        fastavro.schemaless_writer(inner, parsed, body)
        env = {"magic": MAGIC, "type": kind, "headers": None,
               "messageSchemaId": None if kind == "MD" else schema_id,
               "messageSchema": json.dumps(METADATA_SCHEMA) if kind == "MD" else None,
               "message": inner.getvalue()}
        out = io.BytesIO()
        fastavro.schemaless_writer(out, _ENVELOPE, env)
        return out.getvalue()

    @staticmethod
    def _jsonable(kind: str, body: dict) -> dict:
        if kind == "MD":
            return body
        out = dict(body)
        for part in ("data", "beforeData"):
            if out.get(part) is not None:
                out[part] = {k: _json_value(v) for k, v in out[part].items()}
        return out


# ---------------------------------------------------------------------------------------------
# The story
# ---------------------------------------------------------------------------------------------


class _Task:
    def __init__(self, cfg: QlikConfig):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.story = QlikStory(cfg)
        self.enc = _Encoder(cfg)
        self.out: list[Outgoing] = []
        self.change_number = 0
        self.clock = cfg.start
        self.pending_ddl: list[int] = []  # log indexes of DDL entries waiting for their order key
        self.tables = {
            "CUSTOMERS": _Table("CUSTOMERS", _CUSTOMERS),
            "ORDER_LINES": _Table("ORDER_LINES", _ORDER_LINES),
        }

    # -- messages --------------------------------------------------------------------------------
    def metadata(self, t: _Table) -> None:
        cfg = self.cfg
        t.data_schema = data_schema(cfg.schema, t.name, t.columns)
        text = json.dumps(t.data_schema, sort_keys=True)
        t.schema_id = hashlib.sha1(f"{cfg.schema}.{t.name}:{t.version}:{text}".encode()).hexdigest()[:16].upper()
        body = {
            "schemaId": t.schema_id,
            "lineage": {"server": cfg.server, "task": cfg.task, "schema": cfg.schema, "table": t.name,
                        "tableVersion": t.version, "timestamp": self.clock.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]},
            "tableStructure": {"tableColumns": {
                c.name: {"ordinal": i, "type": c.type, "length": c.length, "precision": c.precision,
                         "scale": c.scale, "primaryKeyPosition": c.key}
                for i, c in enumerate(t.columns, start=1)
            }},
            "dataSchema": text,
        }
        self.out.append(Outgoing(QLIK, 0, None, self.enc.encode("MD", body, METADATA_SCHEMA, None),
                                 f"MD:{t.name}:v{t.version}"))

    def data(self, t: _Table, op: str, data: Row, before: Row | None, headers: dict, note: str) -> None:
        headers = {"operation": op, **headers,
                   "externalSchemaId": t.schema_id if self.cfg.external_schema_id else None}
        body = {"schema": self.cfg.schema, "table": t.name, "headers": headers, "data": data, "beforeData": before}
        self.out.append(Outgoing(QLIK, 0, None, self.enc.encode("DT", body, t.data_schema, t.schema_id), note))

    def log_row(self, key: tuple, table: str, row_key: tuple, row: Row | None) -> None:
        for i in self.pending_ddl:
            kind, _, tname, column = self.story.log[i]
            self.story.log[i] = (kind, key, tname, column)
        self.pending_ddl.clear()
        self.story.log.append(("row", key, table, row_key, None if row is None else dict(row)))

    # -- values ----------------------------------------------------------------------------------
    def words(self, n: int) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(n))

    def value(self, t: _Table, col: str, when: dt.datetime) -> object:
        rng = self.rng
        if col == "NAME":
            return self.words(rng.randint(1, 3))
        if col == "CITY":
            return rng.choice(_CITIES)
        if col == "BALANCE":
            return Decimal(rng.randrange(-100_000, 10_000_000)).scaleb(-2)
        if col == "UPDATED":
            return when
        if col == "EMAIL":
            return rng.choice([None, f"user{rng.randrange(1000)}@example.org"])
        if col == "PRODUCT":
            return rng.choice(_PRODUCTS)
        if col == "QTY":
            return rng.randint(1, 50)
        if col == "PRICE":
            return round(rng.uniform(0.5, 500.0), 2)
        if col == "NOTE":
            return rng.choice([None, self.words(rng.randint(20, 60))])  # LOB-sized text
        raise KeyError(col)

    def new_row(self, t: _Table, when: dt.datetime) -> Row:
        if t.name == "CUSTOMERS":
            row: Row = {"ID": t.next_id}
            t.next_id += 1
        else:
            order = 1000 + self.rng.randrange(max(2, len(t.rows) // 3 + 2))
            line = 1 + max((k[1] for k in t.rows if k[0] == order), default=0)
            row = {"ORDER_ID": order, "LINE_NO": line}
        for c in t.columns:
            if c.name not in row:
                row[c.name] = self.value(t, c.name, when)
        return row

    # -- operations on the source --------------------------------------------------------------
    def insert(self, t: _Table, when: dt.datetime, row: Row | None = None) -> _Op:
        row = row or self.new_row(t, when)
        t.rows[t.key_of(row)] = row
        names = frozenset(c.name for c in t.columns)
        return _Op(t, "INSERT", None, row, names, names)

    def update(self, t: _Table, when: dt.datetime) -> _Op:
        rng = self.rng
        before = t.rows[rng.choice(sorted(t.rows))]
        free = [c.name for c in t.columns if not c.key and c.name != "UPDATED"]
        changed = set(rng.sample(free, rng.randint(1, 2)))
        if "UPDATED" in before:
            changed.add("UPDATED")
        # sorted: values are drawn from the seeded generator in a fixed order (a set's order
        # depends on PYTHONHASHSEED, which would make the story differ between processes)
        after = {**before, **{c: self.value(t, c, when) for c in sorted(changed)}}
        t.rows[t.key_of(after)] = after
        names = frozenset(c.name for c in t.columns)
        first = not any(x[0] == t.name for x in self.story.injected.get("uncaptured", []))
        minimal = rng.random() < self.cfg.uncaptured_rate or first
        if minimal:  # only the key and the changed columns are logged
            captured = frozenset(t.key_columns) | changed
        else:
            captured = names
            lob = [c.name for c in t.columns if c.lob and c.name not in changed]
            if lob and rng.random() < 0.5:  # an unchanged LOB the source log does not carry
                captured = captured - set(lob)
        if captured != names:
            self.story.record("uncaptured", t.name, t.key_of(after), tuple(sorted(names - captured)))
        return _Op(t, "UPDATE", before, after, captured, frozenset(changed))

    def delete(self, t: _Table, row: Row | None = None) -> _Op:
        row = row or t.rows[self.rng.choice(sorted(t.rows))]
        del t.rows[t.key_of(row)]
        minimal = self.rng.random() < self.cfg.uncaptured_rate
        names = frozenset(c.name for c in t.columns)
        captured = frozenset(t.key_columns) if minimal else names
        return _Op(t, "DELETE", row, None, captured, frozenset(t.key_columns))

    def random_op(self, when: dt.datetime) -> _Op:
        t = self.tables[self.rng.choice(sorted(self.tables))]
        roll = self.rng.random()
        if not t.rows or roll < 0.4:
            return self.insert(t, when)
        if roll < 0.8:
            return self.update(t, when)
        return self.delete(t)

    # -- the story -------------------------------------------------------------------------------
    def refresh(self) -> None:
        for t in self.tables.values():
            for _ in range(self.cfg.refresh_rows):
                row = self.new_row(t, self.clock)
                t.rows[t.key_of(row)] = row
                headers = {"changeSequence": "", "timestamp": "", "streamPosition": "", "transactionId": "",
                           "changeMask": None, "columnMask": None, "transactionEventCounter": None,
                           "transactionLastEvent": None}
                self.data(t, "REFRESH", dict(row), None, headers, f"DT:REFRESH:{t.name}:{t.key_of(row)}")
                rid = row_identity(self.cfg.schema, t.name, {k: row[k] for k in t.key_columns})
                self.log_row(order_key(None, None, rid), t.name, t.key_of(row), row)
                self.clock += dt.timedelta(milliseconds=self.rng.randint(1, 40))

    def add_email(self) -> None:
        t = self.tables["CUSTOMERS"]
        t.columns = t.columns + (_EMAIL,)
        t.version += 1
        t.rows = {k: {**r, "EMAIL": None} for k, r in t.rows.items()}
        self.metadata(t)
        self.story.log.append(("add_column", None, t.name, "EMAIL"))
        self.pending_ddl.append(len(self.story.log) - 1)
        self.story.record("ddl", t.name, t.version, "ADD EMAIL")

    def transaction(self, number: int) -> None:
        rng = self.rng
        self.clock += dt.timedelta(seconds=rng.uniform(0.5, 20.0))
        start = self.clock
        times = []
        ops: list[_Op] = []
        if number == self.cfg.rollback_at_transaction:
            ops = self.rolled_back(start)
        else:
            for _ in range(rng.randint(1, 4)):
                start += dt.timedelta(milliseconds=rng.randint(1, 50))
                ops.append(self.random_op(start))
        for _ in ops:
            self.clock += dt.timedelta(milliseconds=rng.randint(1, 50))
            times.append(self.clock)
        commit = self.clock
        txn_id = f"{rng.getrandbits(128):032X}"
        for i, (op, when) in enumerate(zip(ops, times), start=1):
            self.change_number += 1
            seq = f"{commit:%Y%m%d%H%M%S}{commit.microsecond // 10_000:02d}{self.change_number:019d}"
            last = i == len(ops)
            self.emit(op, seq, when, txn_id, i, last)
            if last:
                self.story.transaction_ends.append(order_key(seq, i))

    def rolled_back(self, when: dt.datetime) -> list[_Op]:
        """DML and then its inverse, in one transaction: what a rolled-back transaction looks like."""
        cust, lines = self.tables["CUSTOMERS"], self.tables["ORDER_LINES"]
        forward = [self.insert(cust, when)]
        if lines.rows:
            forward.append(self.update(lines, when))
        if len(cust.rows) > 1:
            victim = min(k for k in cust.rows if k != cust.key_of(forward[0].after))
            forward.append(self.delete(cust, cust.rows[victim]))
        inverse = []
        for op in reversed(forward):
            t = op.table
            if op.kind == "INSERT":
                inverse.append(self.delete(t, op.after))
            elif op.kind == "DELETE":
                inverse.append(self.insert(t, when, op.before))
            else:
                t.rows[t.key_of(op.before)] = op.before
                inverse.append(_Op(t, "UPDATE", op.after, op.before, op.captured, op.changed))
        self.story.record("rollback", len(forward) + len(inverse))
        return forward + inverse

    def emit(self, op: _Op, seq: str, when: dt.datetime, txn_id: str, counter: int, last: bool) -> None:
        t = op.table
        n = len(t.columns)
        ordinal = {c.name: i for i, c in enumerate(t.columns, start=1)}
        lob = {c.name for c in t.columns if c.lob}
        shown = op.after if op.kind != "DELETE" else op.before
        data = {c.name: shown[c.name] if c.name in op.captured else None for c in t.columns}
        before = None
        if op.kind == "UPDATE":
            before = {c.name: op.before[c.name] if c.name in op.captured else None for c in t.columns}
        headers = {
            "changeSequence": seq,
            "timestamp": when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3],
            "streamPosition": f"{self.change_number:016X}.{counter:04d}",
            "transactionId": txn_id,
            "changeMask": encode_mask((ordinal[c] for c in op.changed - lob), n),
            "columnMask": encode_mask((ordinal[c] for c in op.captured), n),
            "transactionEventCounter": counter,
            "transactionLastEvent": last,
        }
        self.data(t, op.kind, data, before, headers, f"DT:{op.kind}:{t.name}:{seq}")
        key = t.key_of(shown)
        self.log_row(order_key(seq, counter), t.name, key, None if op.kind == "DELETE" else op.after)

    def play(self) -> QlikStory:
        cfg = self.cfg
        for t in self.tables.values():
            self.metadata(t)
        self.refresh()
        for number in range(cfg.transactions):
            if number == cfg.ddl_at_transaction:
                self.add_email()
            self.transaction(number)
        if self.pending_ddl:
            raise ValueError("ddl_at_transaction must come before the last transaction")
        self.story.messages = self.with_duplicates(self.out)
        return self.story

    def with_duplicates(self, msgs: list[Outgoing]) -> list[Outgoing]:
        """At-least-once delivery: some messages arrive again, 0..2 messages after the original."""
        extra: dict[int, list[Outgoing]] = {}
        for i, m in enumerate(msgs):
            if self.rng.random() < self.cfg.duplicate_rate:
                extra.setdefault(min(i + self.rng.randint(0, 2), len(msgs) - 1), []).append(m)
                self.story.record("duplicate", m.note)
        return [x for i, m in enumerate(msgs) for x in [m, *extra.get(i, [])]]


def build_qlik_story(config: QlikConfig = QlikConfig()) -> QlikStory:
    """Play the story of `config`; deterministic for a given config."""
    return _Task(config).play()
