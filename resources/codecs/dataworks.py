"""Codec of Alibaba DataWorks "sync to Kafka" messages: one JSON value in, normalized records out.

Flow: a reader hands `decode_dataworks(key, value)` the bytes of one Kafka message and gets back
a list of `resources.codecs.cdc` records (usually one; two for an update written as a single
message; none for an op this platform does not need). Source: ../shared/seeds/003_*.txt (the
DataWorks docs, which win over the spec digest where they differ).

What each `op` (case sensitive) becomes:
- INSERT -> Change UPSERT of `after`.
- UPDATE_AFTER -> Change UPSERT of `after`; when the message also carries `before` (the "one
  Kafka record per update" option), a BEFORE_IMAGE of `before` comes first.
- UPDATE_BEFOR (sic, the format's spelling) -> Change BEFORE_IMAGE of `before`.
- DELETE -> Change DELETE whose values are the `before` row.
- TRANSACTION_BEGIN / TRANSACTION_END -> TransactionMark "begin" / "end".
- XACOMMIT -> TransactionMark "end": the commit point of an XA transaction, a safe boundary.
- XAROLLBACK -> TransactionMark "rollback": a prepared XA transaction was rolled back. The docs do
  not say whether its rows were emitted before; the mark is kept so the platform can count and
  flag it, and it is never a commit boundary. Rows already emitted are not retracted here.
- GTID -> no record: a binlog position marker that carries neither rows nor a boundary that
  TRANSACTION_BEGIN/END do not already give.
- CREATE, ALTER, ERASE (drop), QUERY, TRUNCATE, RENAME, CINDEX, DINDEX -> SchemaChange with the
  op as `kind` and `ddl.text` as text (None when `ddl` is null). TRUNCATE empties a table: it is
  a data change with no rows listed, and the lake must apply it at its order_key.
- MHEARTBEAT -> Heartbeat (event_time_us from `timestamp.eventTime`; order_key None: the
  heartbeat carries no sequenceId).
- anything else -> `DataWorksUnknownOpError` (a newer op is not silently dropped).

Decisions where the docs are silent or loose:
- Keys: `schema.primaryKey` when it is a non-empty list. When it is null (or empty) the row is
  identified by a source row-id column if the row has one - Oracle's `rowid` (docs: added as a
  column for Oracle sources) or `#alibaba_rds_row_id#` (the seed's MySQL example: ApsaraDB RDS's
  implicit key of tables without one) - else by the whole row (every declared column). A row id
  is stable while the row lives (Oracle row movement can change `rowid`; then the sync writes a
  delete and an insert). A whole-row key cannot tell identical rows apart: duplicates collapse.
- An update of a whole-row-keyed table changes the row's identity, so its old image is a DELETE,
  not a BEFORE_IMAGE (UPDATE_BEFOR -> DELETE; a combined UPDATE_AFTER -> DELETE then UPSERT).
  Likewise a combined update whose primary key changes yields DELETE of the old key. A two-message
  update of a keyed table cannot show a key change in one message: its UPDATE_BEFOR stays a
  BEFORE_IMAGE and both halves share the sequence part of the order_key, so a consumer may pair
  them. A watermark should never cut between two records of one sequenceId.
- order_key: `(0, int(sequenceId), rank)` when sequenceId is all ASCII digits, else
  `(1, sequenceId, rank)`: numeric ids compare as numbers, the rest as text, and the two kinds
  never meet in one comparison. rank is 0 for an update's old image, 1 otherwise, so the two
  halves of an update (same sequenceId, by the docs) stay ordered. `sequence_order_key` is public
  so the emulator and tests build the very same keys. Records without a sequenceId (heartbeats,
  marks or DDL written without one) get order_key None.
- event_id: `"<sequenceId>:<op>"`, where an update's old image (also from a combined
  UPDATE_AFTER) uses op UPDATE_BEFOR: the same event gets the same id in either update form.
  Duplicates (DataWorks does not deduplicate after an offset reset or failover) differ in
  systemTime but not in this id.
- Values follow `schema.dataColumn` types: BOOLEAN (JSON true/false) -> bool; DOUBLE (JSON
  number) -> float; LONG (JSON integer, or a string of digits - tolerated, lossless) -> int in the
  signed 64-bit range; STRING -> str; BYTES (standard Base64 with padding, as Java's
  Base64.getEncoder writes it) -> bytes; DATE (epoch milliseconds, JSON integer) -> naive UTC
  datetime: the seed's DATE value 1590315269000 carries a time of day, so it is never cut to a
  date. null is None for every type. A type outside these six raises
  `DataWorksUnknownTypeError` when the schema is read, whatever the values.
- A row may omit declared columns: `captured` then names the ones it carries (None when all
  are there). A row must carry its key columns and no undeclared column.
- namespace: `source.dbName`, or `"dbName.schemaName"` when a schemaName is given. `scn`,
  `systemTime`, `checkpointTime`, `ddl.ddlMeta` and `version` are not used; the Kafka key is a
  partitioning hint (the primary key's values, or "" without one) and is never read.
- `transaction_id` / `last_in_transaction` stay None: the format carries no transaction id.

Numbers (`resources.codecs.limits`): `eventTime` must be a time of the years 1..9999 (the ledger
and the lake keep it in microseconds in a 64-bit column), a `sequenceId` of digits and a LONG
value are 64-bit; anything else is a bad envelope or value.

Errors (all `DecodeError`s with part "value" and no location; the reader pins that on):
`DataWorksBadJsonError` (not UTF-8 JSON, or beyond what json.loads reads; also a
`BadJsonError`), `DataWorksBadEnvelopeError` (missing or mistyped schema/payload fields,
numbers out of bounds), `DataWorksUnknownOpError`,
`DataWorksUnknownTypeError`, `DataWorksBadValueError` (a value that does not fit its type).
Pure: no Dagster, no Kafka client.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from typing import Any

from resources.codecs.cdc import (
    BEFORE_IMAGE,
    DELETE,
    UPSERT,
    Change,
    Heartbeat,
    Record,
    SchemaChange,
    TransactionMark,
)
from resources.codecs.json_text import BEYOND_LIMITS, beyond_limits
from resources.codecs.json_text import json_type as _json_type
from resources.codecs.json_text import show as _show
from resources.codecs.limits import (
    LONG_MAX,
    LONG_MIN,
    MAX_TIMESTAMP_US,
    MIN_TIMESTAMP_US,
    long_from_text,
    outside,
)
from resources.errors import BadJsonError, DecodeError

SOURCE = "dataworks"

INSERT, UPDATE_BEFOR, UPDATE_AFTER, DELETE_OP = "INSERT", "UPDATE_BEFOR", "UPDATE_AFTER", "DELETE"
MHEARTBEAT = "MHEARTBEAT"
DATA_OPS = frozenset({INSERT, UPDATE_BEFOR, UPDATE_AFTER, DELETE_OP})
TRANSACTION_OPS = {"TRANSACTION_BEGIN": "begin", "TRANSACTION_END": "end", "XACOMMIT": "end", "XAROLLBACK": "rollback"}
DDL_OPS = frozenset({"CREATE", "ALTER", "ERASE", "QUERY", "TRUNCATE", "RENAME", "CINDEX", "DINDEX"})
IGNORED_OPS = frozenset({"GTID"})
ALL_OPS = DATA_OPS | frozenset(TRANSACTION_OPS) | DDL_OPS | IGNORED_OPS | {MHEARTBEAT}

COLUMN_TYPES = ("BOOLEAN", "DOUBLE", "DATE", "BYTES", "LONG", "STRING")
ROW_ID_COLUMNS = ("rowid", "#alibaba_rds_row_id#")  # Oracle's, ApsaraDB RDS MySQL's implicit key

_DIGITS = re.compile(r"[0-9]+")
_EPOCH = dt.datetime(1970, 1, 1)
_BOM = b"\xef\xbb\xbf"


class DataWorksDecodeError(DecodeError):
    """Root of the DataWorks codec's errors."""

    kind = "dataworks"


class DataWorksBadJsonError(DataWorksDecodeError, BadJsonError):
    """The value is not UTF-8 JSON."""

    kind = "dataworks_bad_json"


class DataWorksBadEnvelopeError(DataWorksDecodeError):
    """The JSON is not a DataWorks message: schema/payload or one of their fields is missing or mistyped."""

    kind = "dataworks_bad_envelope"


class DataWorksUnknownOpError(DataWorksDecodeError):
    """`payload.op` is not one of the documented ops (they are case sensitive)."""

    kind = "dataworks_unknown_op"


class DataWorksUnknownTypeError(DataWorksDecodeError):
    """A column of `schema.dataColumn` has a type outside BOOLEAN, DOUBLE, DATE, BYTES, LONG, STRING."""

    kind = "dataworks_unknown_type"


class DataWorksBadValueError(DataWorksDecodeError):
    """A row value does not fit its column's declared type."""

    kind = "dataworks_bad_value"


# ---------------------------------------------------------------------------------------------
# Public helpers
# ---------------------------------------------------------------------------------------------


def sequence_order_key(sequence_id: str, *, old_image: bool = False) -> tuple:
    """The order_key of a record with this sequenceId (see the module docstring)."""
    rank = 0 if old_image else 1
    if _DIGITS.fullmatch(sequence_id):
        return (0, int(sequence_id), rank)
    return (1, sequence_id, rank)


def decode_dataworks(key: bytes | None, value: bytes) -> list[Record]:
    """Decode one DataWorks Kafka message into normalized records (`key` is not used)."""
    doc = _load_json(value)
    if not isinstance(doc, dict):
        raise _envelope(f"message is a JSON {_json_type(doc)}, not an object")
    for name in ("schema", "payload"):
        if name not in doc:
            raise _envelope(f"message lacks field {name!r}")
    schema, payload = doc["schema"], doc["payload"]
    if not isinstance(payload, dict):
        raise _envelope(f"'payload' is a JSON {_json_type(payload)}, not an object")
    if schema is not None and not isinstance(schema, dict):
        raise _envelope(f"'schema' is a JSON {_json_type(schema)}, not an object or null")
    schema = schema or {}

    if "op" not in payload:
        raise _envelope("payload lacks field 'op'")
    op = payload["op"]
    if not isinstance(op, str):
        raise _envelope(f"payload field 'op' must be a string, got {_show(op)}")
    if op not in ALL_OPS:
        raise DataWorksUnknownOpError(f"unknown op {_show(op)} (ops are case sensitive)", part="value")

    event_time_us = _event_time_us(payload)
    if op == MHEARTBEAT:
        return [Heartbeat(SOURCE, event_time_us)]
    if op in IGNORED_OPS:
        return []
    sequence_id = _sequence_id(payload, required=op in DATA_OPS)
    order_key = sequence_order_key(sequence_id) if sequence_id is not None else None
    if op in TRANSACTION_OPS:
        return [TransactionMark(SOURCE, None, TRANSACTION_OPS[op], order_key, event_time_us)]
    namespace, table = _source(schema, required=op in DATA_OPS)
    if op in DDL_OPS:
        return [SchemaChange(SOURCE, namespace, table, op, _ddl_text(payload), order_key, event_time_us)]
    assert sequence_id is not None and table is not None
    return _changes(op, schema, payload, namespace, table, sequence_id, event_time_us)


# ---------------------------------------------------------------------------------------------
# Row changes
# ---------------------------------------------------------------------------------------------


def _changes(op: str, schema: dict, payload: dict, namespace: str | None, table: str,
             sequence_id: str, event_time_us: int) -> list[Record]:
    columns = _columns(schema)
    types = dict(columns)
    key_columns, whole_row = _key_columns(schema, columns)
    before = _row(payload, "before", types, key_columns)
    after = _row(payload, "after", types, key_columns)

    def change(operation: str, row: tuple[dict, frozenset | None], label: str) -> Change:
        values, captured = row
        old = label == UPDATE_BEFOR
        return Change(
            source=SOURCE, namespace=namespace, table=table, operation=operation,
            key_columns=key_columns, values=values,
            order_key=sequence_order_key(sequence_id, old_image=old), captured=captured,
            column_types=types, event_time_us=event_time_us,
            event_id=f"{sequence_id}:{label}", source_op=op,
        )

    def need(row, name: str):
        if row is None:
            raise _envelope(f"op {op} needs payload.{name}, which is null or missing")
        return row

    if op == INSERT:
        return [change(UPSERT, need(after, "after"), INSERT)]
    if op == DELETE_OP:
        return [change(DELETE, need(before, "before"), DELETE_OP)]
    if op == UPDATE_BEFOR:
        return [change(DELETE if whole_row else BEFORE_IMAGE, need(before, "before"), UPDATE_BEFOR)]
    # UPDATE_AFTER, with or without the old image in the same message.
    upsert = change(UPSERT, need(after, "after"), UPDATE_AFTER)
    if before is None:
        return [upsert]
    key_moved = whole_row or _key_of(before[0], key_columns) != _key_of(after[0], key_columns)
    return [change(DELETE if key_moved else BEFORE_IMAGE, before, UPDATE_BEFOR), upsert]


def _key_of(values: dict, key_columns: tuple[str, ...]) -> tuple:
    return tuple(values[c] for c in key_columns)


def _columns(schema: dict) -> list[tuple[str, str]]:
    spec = schema.get("dataColumn")
    if not isinstance(spec, list) or not spec:
        raise _envelope(f"schema.dataColumn must be a non-empty array for a row change, got {_show(spec)}")
    columns: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, col in enumerate(spec):
        if not isinstance(col, dict) or not isinstance(col.get("name"), str) or not isinstance(col.get("type"), str):
            raise _envelope(f"schema.dataColumn[{i}] must be an object with string 'name' and 'type', got {_show(col)}")
        name, typ = col["name"], col["type"]
        if name in seen:
            raise _envelope(f"schema.dataColumn declares column {name!r} twice")
        if typ not in COLUMN_TYPES:
            raise DataWorksUnknownTypeError(
                f"column {name!r} has type {typ!r}; known types: {', '.join(COLUMN_TYPES)}", part="value")
        seen.add(name)
        columns.append((name, typ))
    return columns


def _key_columns(schema: dict, columns: list[tuple[str, str]]) -> tuple[tuple[str, ...], bool]:
    """(key columns, True when the key is the whole row)."""
    names = [n for n, _ in columns]
    pk = schema.get("primaryKey")
    if pk is not None and not isinstance(pk, list):
        raise _envelope(f"schema.primaryKey must be an array or null, got {_show(pk)}")
    if pk:
        for name in pk:
            if not isinstance(name, str):
                raise _envelope(f"schema.primaryKey holds a non-string {_show(name)}")
            if name not in names:
                raise _envelope(f"schema.primaryKey names {name!r}, which schema.dataColumn does not declare")
        if len(set(pk)) != len(pk):
            raise _envelope(f"schema.primaryKey repeats a column: {_show(pk)}")
        return tuple(pk), False
    for row_id in ROW_ID_COLUMNS:
        if row_id in names:
            return (row_id,), False
    return tuple(names), True


def _row(payload: dict, name: str, types: dict[str, str], key_columns: tuple[str, ...]):
    """(typed values in declared order, captured) of payload[name], or None when it is null."""
    image = payload.get(name)
    if image is None:
        return None
    if not isinstance(image, dict) or not isinstance(image.get("dataColumn"), dict):
        raise _envelope(f"payload.{name} must be null or an object with a 'dataColumn' object, got {_show(image)}")
    raw = image["dataColumn"]
    for column in raw:
        if column not in types:
            raise _envelope(f"payload.{name} has column {column!r}, which schema.dataColumn does not declare")
    for column in key_columns:
        if column not in raw:
            raise _envelope(f"payload.{name} lacks key column {column!r}")
    values = {c: _typed(c, t, raw[c], name) for c, t in types.items() if c in raw}
    captured = None if len(values) == len(types) else frozenset(values)
    return values, captured


def _typed(column: str, typ: str, value: Any, image: str) -> Any:
    if value is None:
        return None

    def bad(why: str) -> DataWorksBadValueError:
        reason = f"payload.{image} column {column!r} ({typ}): {why}, got {_show(value)}"
        return DataWorksBadValueError(reason, part="value")

    is_int = isinstance(value, int) and not isinstance(value, bool)
    if typ == "STRING":
        if not isinstance(value, str):
            raise bad("expected a JSON string")
        return value
    if typ == "BOOLEAN":
        if not isinstance(value, bool):
            raise bad("expected true or false")
        return value
    if typ == "DOUBLE":
        if not (is_int or isinstance(value, float)):
            raise bad("expected a JSON number")
        try:
            return float(value)
        except OverflowError:
            raise bad("out of the DOUBLE range") from None
    if typ == "LONG":
        if isinstance(value, str) and _DIGITS.fullmatch(value.removeprefix("-")):
            value_int = long_from_text(value)  # None beyond 64 bits (never int() of 5000 digits)
        elif is_int:
            value_int = value if LONG_MIN <= value <= LONG_MAX else None
        else:
            raise bad("expected a JSON integer")
        if value_int is None:
            raise bad("out of the signed 64-bit LONG range")
        return value_int
    if typ == "DATE":
        if not is_int:
            raise bad("expected epoch milliseconds as a JSON integer")
        try:
            return _EPOCH + dt.timedelta(milliseconds=value)
        except OverflowError:
            raise bad("epoch milliseconds out of the datetime range") from None
    # BYTES
    if not isinstance(value, str):
        raise bad("expected a Base64 JSON string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise bad("not standard Base64") from None


# ---------------------------------------------------------------------------------------------
# Envelope fields
# ---------------------------------------------------------------------------------------------


def _event_time_us(payload: dict) -> int:
    ts = payload.get("timestamp")
    if not isinstance(ts, dict):
        raise _envelope(f"payload.timestamp must be an object, got {_show(ts)}")
    event_time = ts.get("eventTime")
    if not isinstance(event_time, int) or isinstance(event_time, bool):
        raise _envelope(f"payload.timestamp.eventTime must be epoch milliseconds (an integer), got {_show(event_time)}")
    why = outside(event_time, MIN_TIMESTAMP_US // 1000, MAX_TIMESTAMP_US // 1000, "payload.timestamp.eventTime")
    if why:
        raise _envelope(f"{why} (epoch milliseconds of the years 1..9999)")
    return event_time * 1000


def _sequence_id(payload: dict, *, required: bool) -> str | None:
    seq = payload.get("sequenceId")
    if seq is None:
        if required:
            raise _envelope(f"op {payload['op']} needs payload.sequenceId, which is null or missing")
        return None
    if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
        seq = str(seq)  # the docs say STRING; a non-negative number means the same
    if not isinstance(seq, str) or not seq:
        raise _envelope(f"payload.sequenceId must be a non-empty string, got {_show(seq)}")
    if _DIGITS.fullmatch(seq) and long_from_text(seq) is None:
        # A long, as the seed's are (epoch ms and a counter): one far beyond would make every
        # later message look re-sent after a failover, and the sealer would never cut again.
        raise _envelope(f"payload.sequenceId {_show(seq)} is beyond a long ({len(seq)} digits)")
    return seq


def _source(schema: dict, *, required: bool) -> tuple[str | None, str | None]:
    source = schema.get("source")
    if source is None:
        if required:
            raise _envelope("a row change needs schema.source, which is null or missing")
        return None, None
    if not isinstance(source, dict):
        raise _envelope(f"schema.source must be an object or null, got {_show(source)}")
    fields = {}
    for name in ("dbName", "schemaName", "tableName"):
        v = source.get(name)
        if v is not None and not isinstance(v, str):
            raise _envelope(f"schema.source.{name} must be a string or null, got {_show(v)}")
        fields[name] = v or None
    if required and fields["tableName"] is None:
        raise _envelope("a row change needs schema.source.tableName")
    db, sch = fields["dbName"], fields["schemaName"]
    namespace = f"{db}.{sch}" if db and sch and sch != db else (db or sch)
    return namespace, fields["tableName"]


def _ddl_text(payload: dict) -> str | None:
    ddl = payload.get("ddl")
    if ddl is None:
        return None
    if not isinstance(ddl, dict):
        raise _envelope(f"payload.ddl must be an object or null, got {_show(ddl)}")
    text = ddl.get("text")
    if text is not None and not isinstance(text, str):
        raise _envelope(f"payload.ddl.text must be a string or null, got {_show(text)}")
    return text


# ---------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------


def _load_json(data: bytes) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DataWorksBadJsonError(f"value is {type(data).__name__}, not bytes", part="value")
    data = bytes(data)
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataWorksBadJsonError(f"not UTF-8: {exc}", part="value") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataWorksBadJsonError(f"not JSON: {exc}", part="value") from None
    except BEYOND_LIMITS as exc:
        raise DataWorksBadJsonError(beyond_limits(exc), part="value") from None


def _envelope(reason: str) -> DataWorksBadEnvelopeError:
    return DataWorksBadEnvelopeError(reason, part="value")



