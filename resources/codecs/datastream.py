"""Codec of Google Cloud Datastream events (seed 004): one Kafka value in, normalized `Change`s out.

Flow: a reader hands `decode_datastream` the raw key and value of one Kafka message; the value is
either one JSON event (column name -> value) or one Avro Object Container File (magic `Obj\\x01`)
whose records are events. `parse_datastream` gives the events with every metadata field typed
(`DatastreamEvent`); `decode_datastream` turns each into a `resources.codecs.cdc.Change`. The
emulator and tests go the other way with `encode_json_event` / `encode_avro_events`.

Envelope decisions (the seed shows JSON only; where it is silent, this is the rule):
- JSON: one event object per message. The seed's examples are not valid JSON (missing and trailing
  commas, keys with no value): a typo of the document, rejected as `BadJsonError`, never repaired.
- Avro: the seed says an Avro event holds "the column index and value; the index gives the column
  name and unified type from the schema in the Avro header". That is Avro's own record encoding
  (fields written by position, named and typed by the writer schema in the container header), so
  the Avro form is a container file whose record schema is the event envelope and whose `payload`
  field is a record with one field per column. Every record of the file is one event, so one
  message may carry many (a Datastream file forwarded whole). `column_types` come from the
  payload's field types (logical type if any, e.g. `timestamp-micros`, `decimal(10,2)`); JSON
  carries no types, so it gives `{}`. Aware datetimes from Avro become naive UTC, as cdc.py says.
- Timestamps (`read_timestamp`, `source_timestamp`): Avro `timestamp-millis`; in JSON the seed
  writes ISO-8601 text ("2019-11-07T02:15:39", "2019-11-07T07:37:16.808Z": UTC with or without
  `Z`) while its table says "epoch milliseconds", so integers and digit strings are read as epoch
  milliseconds too. `schema_key`, `sort_keys`, `read_timestamp`, `stream_name`, `object` are
  optional (the seed's own examples lack `schema_key` and `sort_keys`); extra fields are tolerated.
- The Kafka key is not read: every fact is in the value (a bridge may key by object to partition).

Operations (`payload` is the whole row after the change; for DELETE the deleted row):
- INSERT, UPDATE-INSERT and UPDATE (the seed's Oracle UPDATE example says `"change_type":
  "UPDATE"`, outside its own list: the seed wins, it is accepted) -> UPSERT.
- DELETE -> DELETE. `is_deleted: true` -> DELETE whatever the change_type.
- UPDATE-DELETE -> DELETE, not BEFORE_IMAGE. It is the old image of an updated row, emitted before
  the UPDATE-INSERT of the new image. When the update changed the key, the old key must go, and
  only this event says so: dropping it (BEFORE_IMAGE) would leave the old key in the lake forever.
  When the key did not change, deleting then upserting the same key in order gives the same row.
  The order key puts it first (rank below) even when both share one log position.
- A backfill event may omit change_type (-> UPSERT unless is_deleted); a CDC event may not.

Keys: MySQL `primary_keys` (empty: the table has none, key_columns stays ()). Oracle events carry
no key list, so the row is keyed by its rowid (`rowid` or the seed example's `row_id`): the value
is added to `values` as column `ROWID`, Oracle's pseudo-column name, which no real column may have.
A rowid is stable for a row's life (a key-changing UPDATE keeps it), but not across row movement
(shrink, partition key update, export/import): such a move shows as a new rowid. An Oracle event
that does carry `primary_keys` is keyed by them. Other sources: `primary_keys` if present.

Order (`order_key`, comparable between any two Datastream changes; meaningful within one stream):
    (family, db, position, rank, sort_keys, uuid)
- family 1 (CDC): position is MySQL (log file number, log file name, log_position), so
  mysql-bin.999999 < mysql-bin.1000000; Oracle (scn, rs_id as integers, ssn); any other source its
  `sort_keys` (required then). For Oracle the seed says (rs_id, ssn) orders events; the scn comes
  first because it is the database's own clock (the seed calls it the log position): in one redo
  thread it sorts exactly as (rs_id, ssn), across RAC threads (whose rs_ids are unrelated) it is
  the only valid order, and the seed's own T0/T1/T2 examples are in order by scn but not by rs_id.
- family 0 (backfill and supplementation reads): position is (source_timestamp,). THE BACKFILL
  RULE: a read sorts before every CDC event of its stream, so per key the newest CDC event always
  wins over a read, and a read only survives for a row that no CDC event touched. Why it
  converges whatever the arrival order: CDC starts before the first read, and every change after
  that has a CDC event carrying the whole row, so the newest CDC event of a key is at least as
  new as any read of it; a key without CDC events was unchanged since the stream began, so any
  read of it is current. Between reads of one key the later read wins. A consumer applies, per
  key, the change with the greatest order_key and keeps deletes as tombstones with theirs (a late
  read must not resurrect a row a CDC event deleted); a change at or below the stored key is
  dropped, which also drops duplicates. Supplementation reads (`oracle-supplementation`, re-reads
  after a rollback) follow the same rule and are flagged is_backfill.
- rank 0 for deletes, 1 for upserts: ties inside one log position (one row event's old and new
  images) apply the delete first, which is right for any single statement, key changes included.
- sort_keys (strings and longs wrapped as (1, str) / (0, int) so mixed arrays compare) and the
  uuid break any remaining tie. The order key does not use read_timestamp, so a re-read duplicate
  (same uuid) has the same key as its first delivery.

Numbers (`resources.codecs.limits`): timestamps must fall in the years 1..9999 (the ledger and
the lake keep event times in microseconds in a 64-bit column); `log_position`, `scn`, `ssn` and
the longs of `sort_keys` are 64-bit; a MySQL log file number has at most 19 digits; a payload
integer fits 64 bits (a JSON payload is untyped: the lake lands an integer column as bigint, so
an unsigned BIGINT above 2^63 - 1 sent as a JSON number is quarantined, not landed). Anything
else is a `DatastreamBadEnvelopeError`, never an unbounded conversion or a crash.

Errors (no location: whoever read the bytes pins it on with `located()`), `part="value"`:
`BadJsonError` (not UTF-8 JSON, or beyond what json.loads reads), `BadContainerFileError` (broken
Avro container),
`DatastreamBadEnvelopeError` (a field missing, mistyped or inconsistent; a payload column holding an
array or object),
`DatastreamUnknownChangeTypeError`, `DatastreamUnknownReadMethodError` (family not cdc, backfill
or supplementation). Pure: no Dagster, no Kafka client.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException

from resources.codecs.avro_counts import open_container
from resources.codecs.cdc import DELETE, UPSERT, Change, Record
from resources.codecs.json_text import BEYOND_LIMITS, beyond_limits
from resources.codecs.limits import LONG_MAX, LONG_MIN, MAX_TIMESTAMP_US, MIN_TIMESTAMP_US, long_from_text, outside
from resources.errors import BadContainerFileError, BadJsonError, DecodeError

__all__ = [
    "DatastreamBadEnvelopeError", "DatastreamEvent", "DatastreamUnknownChangeTypeError",
    "DatastreamUnknownReadMethodError", "SourceMetadata", "avro_event_schema", "decode_datastream",
    "encode_avro_events", "encode_json_event", "parse_datastream", "to_change",
]

SOURCE = "datastream"
ROWID = "ROWID"
MAGIC = b"Obj\x01"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

CDC, BACKFILL, SUPPLEMENTATION = "cdc", "backfill", "supplementation"
_FAMILY_RANK = {BACKFILL: 0, SUPPLEMENTATION: 0, CDC: 1}
CHANGE_TYPES = {"INSERT": UPSERT, "UPDATE-INSERT": UPSERT, "UPDATE": UPSERT,
                "UPDATE-DELETE": DELETE, "DELETE": DELETE}

_AVRO_ERRORS: tuple[type[BaseException], ...] = (
    EOFError, ValueError, LookupError, OverflowError, TypeError, struct.error, zlib.error,
    SchemaParseException,
)
try:  # snappy blocks are decompressed by cramjam, whose errors are its own
    import cramjam

    _AVRO_ERRORS += (cramjam.DecompressionError,)
except ImportError:  # pragma: no cover - depends on the environment
    pass


class DatastreamBadEnvelopeError(DecodeError):
    """The value is JSON or Avro, but not a Datastream event: a field missing, mistyped, inconsistent."""

    kind = "datastream_bad_envelope"


class DatastreamUnknownChangeTypeError(DecodeError):
    """change_type is none of INSERT, UPDATE-INSERT, UPDATE, UPDATE-DELETE, DELETE (case sensitive)."""

    kind = "datastream_unknown_change_type"


class DatastreamUnknownReadMethodError(DecodeError):
    """read_method names no single family among cdc, backfill, supplementation."""

    kind = "datastream_unknown_read_method"


def _bad(reason: str) -> DatastreamBadEnvelopeError:
    return DatastreamBadEnvelopeError(reason, part="value")


# ---------------------------------------------------------------- parsed events


@dataclass(frozen=True)
class SourceMetadata:
    """`source_metadata`, MySQL and Oracle fields together; what an event lacks is None."""

    database: str | None = None
    schema: str | None = None
    table: str | None = None
    change_type: str | None = None
    is_deleted: bool | None = None
    log_file: str | None = None
    log_position: int | None = None  # MySQL
    primary_keys: tuple[str, ...] | None = None  # MySQL (and any source that sends it)
    scn: int | None = None  # Oracle from here on
    row_id: str | None = None  # `rowid` in the seed's table, `row_id` in its examples
    tx_id: str | None = None
    rs_id: str | None = None
    ssn: int | None = None


@dataclass(frozen=True)
class DatastreamEvent:
    read_method: str
    database_type: str  # "mysql", "oracle", ... (read_method's prefix; "" when it has none)
    family: str  # CDC | BACKFILL | SUPPLEMENTATION
    uuid: str
    source_timestamp_us: int
    source_metadata: SourceMetadata
    payload: dict[str, Any]
    stream_name: str | None = None
    object: str | None = None
    schema_key: str | None = None
    read_timestamp_us: int | None = None
    sort_keys: tuple[str | int, ...] | None = None
    column_types: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------- field readers


def _opt_str(obj: Mapping, name: str, where: str = "") -> str | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise _bad(f"{where}{name} is {type(value).__name__}, expected a string")
    return value


def _req_str(obj: Mapping, name: str, where: str = "") -> str:
    value = _opt_str(obj, name, where)
    if not value:
        raise _bad(f"{where}{name} is missing or empty")
    return value


def _opt_long(obj: Mapping, name: str, where: str = "") -> int | None:
    """A long; a decimal digit string is accepted (JSON writers quote longs beyond 2^53)."""
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if LONG_MIN <= value <= LONG_MAX:
            return value
    elif isinstance(value, str) and long_from_text(value) is not None and not value.strip().startswith("-"):
        return long_from_text(value)
    raise _bad(f"{where}{name} is {_brief(value)}, expected a long")


def _brief(value: Any) -> str:
    """A value as an error shows it: its repr, cut to 80 characters (it may be 5000 digits)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _timestamp_us(value: Any, name: str) -> int:
    """Epoch microseconds of an Avro timestamp (datetime), epoch millis, or ISO-8601 UTC text."""
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, int) and not isinstance(value, bool):
        return _millis(value, name)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?[0-9]+", text):
            millis = long_from_text(text)
            if millis is None:
                raise _bad(f"{name} has {len(text)} digits: no epoch milliseconds of the years 1..9999")
            return _millis(millis, name)
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError:
            raise _bad(f"{name} {_brief(value)} is neither ISO-8601 nor epoch milliseconds") from None
    else:
        raise _bad(f"{name} is {type(value).__name__}, expected a timestamp")
    if moment.tzinfo is None:  # Datastream timestamps are UTC
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return (moment - EPOCH) // dt.timedelta(microseconds=1)


def _millis(millis: int, name: str) -> int:
    """Epoch milliseconds as microseconds, within the years 1..9999 (a 64-bit column holds them)."""
    why = outside(millis, MIN_TIMESTAMP_US // 1000, MAX_TIMESTAMP_US // 1000, name)
    if why:
        raise _bad(f"{why} (epoch milliseconds of the years 1..9999)")
    return millis * 1000


def _read_method(text: str) -> tuple[str, str]:
    """(database type, family) of a read_method such as mysql-backfill-fulldump."""
    parts = text.split("-")
    families = [p for p in parts if p in _FAMILY_RANK]
    if len(families) != 1:
        raise DatastreamUnknownReadMethodError(
            f"read_method {text!r} is not of a known family (cdc, backfill, supplementation)", part="value")
    return "-".join(parts[: parts.index(families[0])]), families[0]


def _source_metadata(obj: Any) -> SourceMetadata:
    if not isinstance(obj, Mapping):
        raise _bad(f"source_metadata is {type(obj).__name__}, expected an object")
    w = "source_metadata."
    keys = obj.get("primary_keys")
    if keys is not None and (not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys)):
        raise _bad(f"{w}primary_keys is {keys!r}, expected an array of column names")
    deleted = obj.get("is_deleted")
    if deleted is not None and not isinstance(deleted, bool):
        raise _bad(f"{w}is_deleted is {deleted!r}, expected a boolean")
    rowid = _opt_str(obj, "rowid", w)
    row_id = _opt_str(obj, "row_id", w)
    if rowid and row_id and rowid != row_id:
        raise _bad(f"{w}rowid {rowid!r} and row_id {row_id!r} differ")
    return SourceMetadata(
        database=_opt_str(obj, "database", w), schema=_opt_str(obj, "schema", w),
        table=_opt_str(obj, "table", w), change_type=_opt_str(obj, "change_type", w), is_deleted=deleted,
        log_file=_opt_str(obj, "log_file", w), log_position=_opt_long(obj, "log_position", w),
        primary_keys=None if keys is None else tuple(keys), scn=_opt_long(obj, "scn", w),
        row_id=rowid or row_id or None, tx_id=_opt_str(obj, "tx_id", w), rs_id=_opt_str(obj, "rs_id", w),
        ssn=_opt_long(obj, "ssn", w),
    )


def _naive_utc(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def _event(obj: Any, column_types: dict[str, str]) -> DatastreamEvent:
    if not isinstance(obj, Mapping):
        raise _bad(f"an event is a JSON object, got {type(obj).__name__}")
    read_method = _req_str(obj, "read_method")
    db, family = _read_method(read_method)
    if "source_timestamp" not in obj or obj["source_timestamp"] is None:
        raise _bad("source_timestamp is missing")
    read_ts = obj.get("read_timestamp")
    sort_keys = obj.get("sort_keys")
    if sort_keys is not None and (not isinstance(sort_keys, list) or not all(
            isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool) and LONG_MIN <= k <= LONG_MAX)
            for k in sort_keys)):
        raise _bad(f"sort_keys is {_brief(sort_keys)}, expected an array of strings and longs")
    payload = obj.get("payload")
    if not isinstance(payload, Mapping):
        raise _bad(f"payload is {type(payload).__name__}, expected an object (the whole row)")
    nested = next((k for k, v in payload.items() if isinstance(v, (Mapping, list, tuple))), None)
    if nested is not None:
        # A column holds one value: an array or object there is no row the lake can hold, and
        # landing it would fail the whole delta (every later one waits behind it).
        raise _bad(f"payload column {nested!r} is {'an object' if isinstance(payload[nested], Mapping) else 'an array'}"
                   ", expected a single value (null, boolean, number, string, or an Avro scalar)")
    huge = next((k for k, v in payload.items() if isinstance(v, int) and not LONG_MIN <= v <= LONG_MAX), None)
    if huge is not None:
        # JSON integers carry no type: the lake lands them as bigint, and one beyond 64 bits would
        # fail its delta (and hold every later one). Avro payloads type them (long, decimal).
        raise _bad(f"payload column {huge!r} holds an integer beyond 64 bits: {_brief(payload[huge])}")
    return DatastreamEvent(
        read_method=read_method, database_type=db, family=family, uuid=_req_str(obj, "uuid"),
        source_timestamp_us=_timestamp_us(obj["source_timestamp"], "source_timestamp"),
        source_metadata=_source_metadata(obj.get("source_metadata")),
        payload={k: _naive_utc(v) for k, v in payload.items()},
        stream_name=_opt_str(obj, "stream_name"), object=_opt_str(obj, "object"),
        schema_key=_opt_str(obj, "schema_key"),
        read_timestamp_us=None if read_ts is None else _timestamp_us(read_ts, "read_timestamp"),
        sort_keys=None if sort_keys is None else tuple(sort_keys), column_types=column_types,
    )


# ---------------------------------------------------------------- Avro envelope


def _type_name(t: Any) -> str:
    """A readable name of an Avro type: its logical type if any, the non-null branch of a union."""
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        return _type_name(branches[0]) if len(branches) == 1 else "union<" + ",".join(map(_type_name, branches)) + ">"
    if isinstance(t, dict):
        logical = t.get("logicalType")
        if logical == "decimal":
            return f"decimal({t.get('precision')},{t.get('scale', 0)})"
        if logical:
            return str(logical)
        kind = t.get("type")
        if kind == "array":
            return f"array<{_type_name(t.get('items'))}>"
        if kind == "map":
            return f"map<{_type_name(t.get('values'))}>"
        return str(kind) if kind in ("record", "enum", "fixed") else _type_name(kind)
    return str(t)


def _record_type(t: Any) -> dict | None:
    """The record schema of a field type that is a record or a union of null and one record."""
    if isinstance(t, list):
        records = [b for b in t if b != "null"]
        t = records[0] if len(records) == 1 else None
    return t if isinstance(t, dict) and t.get("type") == "record" else None


def _avro_events(data: bytes) -> list[DatastreamEvent]:
    try:
        reader = open_container(data)  # its counts bounded by its bytes (resources/codecs/avro_counts.py)
        schema = json.loads(reader.metadata["avro.schema"])
    except _AVRO_ERRORS as exc:
        raise BadContainerFileError(f"unreadable Avro container header: {type(exc).__name__}: {exc}",
                                    part="value") from exc
    fields = {f.get("name"): f.get("type") for f in schema.get("fields", [])} if isinstance(schema, dict) else {}
    missing = [n for n in ("read_method", "uuid", "source_timestamp", "source_metadata", "payload") if n not in fields]
    if missing:
        raise _bad(f"the Avro writer schema is not a Datastream event: no field {', '.join(missing)}")
    payload = _record_type(fields["payload"])
    if payload is None:
        raise _bad(f"the Avro payload field is {_type_name(fields['payload'])}, expected a record of columns")
    column_types = {f["name"]: _type_name(f["type"]) for f in payload.get("fields", [])}
    events, count = [], 0
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return events
        except _AVRO_ERRORS as exc:
            raise BadContainerFileError(f"truncated or corrupt Avro container after {count} events: "
                                        f"{type(exc).__name__}: {exc}", part="value") from exc
        count += 1
        events.append(_event(record, dict(column_types)))


# ---------------------------------------------------------------- decoding


def parse_datastream(value: bytes) -> list[DatastreamEvent]:
    """The events of one message value (JSON: one; Avro container: one per record), typed."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise _bad(f"the value is {type(value).__name__}, expected bytes")
    data = bytes(value)
    if not data.strip():
        raise _bad("the value is empty")
    if data[:4] == MAGIC:
        return _avro_events(data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadJsonError(f"not UTF-8: {exc}", part="value") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadJsonError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", part="value") from None
    except BEYOND_LIMITS as exc:
        raise BadJsonError(beyond_limits(exc), part="value") from None
    return [_event(obj, {})]


def _sort_keys(keys: tuple[str | int, ...] | None) -> tuple:
    return tuple((1, k) if isinstance(k, str) else (0, k) for k in keys or ())


def _rs_id(text: str) -> tuple[int, ...]:
    """An Oracle RS_ID (" 0x0073c9.000a4e4c.01d0 ": log sequence, block, offset) as integers."""
    parts = text.strip().split(".")
    try:
        return tuple(int(p, 16) for p in parts)
    except ValueError:
        raise _bad(f"source_metadata.rs_id {text!r} is not hexadecimal numbers joined by '.'") from None


def _position(e: DatastreamEvent) -> tuple:
    m = e.source_metadata
    if e.database_type == "mysql":
        number = re.search(r"(?<![0-9])([0-9]{1,19})$", m.log_file or "")  # ASCII: int() reads it, bounded
        if number is None or m.log_position is None:
            raise _bad(f"a MySQL CDC event needs log_file (ending in its sequence number) and log_position, "
                       f"got {m.log_file!r} and {m.log_position!r}")
        return (int(number.group(1)), m.log_file, m.log_position)
    if e.database_type == "oracle":
        if m.scn is None or not m.rs_id or m.ssn is None:
            raise _bad(f"an Oracle CDC event needs scn, rs_id and ssn, got {m.scn!r}, {m.rs_id!r}, {m.ssn!r}")
        return (m.scn, _rs_id(m.rs_id), m.ssn)
    if not e.sort_keys:
        raise _bad(f"a {e.read_method} event needs sort_keys to be ordered")
    return _sort_keys(e.sort_keys)


def to_change(e: DatastreamEvent) -> Change:
    """The normalized change of one parsed event (rules in the module docstring)."""
    m = e.source_metadata
    if not m.table:
        raise _bad("source_metadata.table is missing or empty")
    if m.change_type in (None, ""):
        if e.family == CDC:
            raise _bad("source_metadata.change_type is missing on a CDC event")
        operation = UPSERT
    elif m.change_type in CHANGE_TYPES:
        operation = CHANGE_TYPES[m.change_type]
    else:
        raise DatastreamUnknownChangeTypeError(
            f"change_type {m.change_type!r} is not one of {', '.join(CHANGE_TYPES)}", part="value")
    if m.is_deleted:
        operation = DELETE

    values = dict(e.payload)
    if m.primary_keys:
        key_columns = m.primary_keys
    elif e.database_type == "oracle" and m.row_id:
        if values.get(ROWID, m.row_id) != m.row_id:
            raise _bad(f"payload column {ROWID} {values[ROWID]!r} is not the event's rowid {m.row_id!r}")
        values[ROWID] = m.row_id
        key_columns = (ROWID,)
    else:
        key_columns = ()
    absent = [c for c in key_columns if c not in values]
    if absent:
        raise _bad(f"primary key column(s) {', '.join(absent)} not in the payload")

    rank = 0 if operation == DELETE else 1
    position = (e.source_timestamp_us,) if e.family != CDC else _position(e)
    order_key = (_FAMILY_RANK[e.family], e.database_type, position, rank, _sort_keys(e.sort_keys), e.uuid)
    namespace = (m.database or m.schema) if e.database_type == "mysql" else (m.schema or m.database)
    return Change(
        source=SOURCE, namespace=namespace, table=m.table, operation=operation, key_columns=key_columns,
        values=values, order_key=order_key, captured=None, column_types=dict(e.column_types),
        transaction_id=m.tx_id or None, last_in_transaction=None, event_time_us=e.source_timestamp_us,
        event_id=e.uuid, is_backfill=e.family != CDC, source_op=m.change_type or None,
    )


def decode_datastream(key: bytes | None, value: bytes) -> list[Record]:
    """The normalized changes of one Kafka message (the key is not read)."""
    return [to_change(e) for e in parse_datastream(value)]


# ---------------------------------------------------------------- encoding (emulator, tests)


def _iso_millis(ms: int) -> str:
    moment = EPOCH + dt.timedelta(milliseconds=ms)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def encode_json_event(event: Mapping[str, Any]) -> bytes:
    """One event as one-line UTF-8 JSON. Timestamps given as epoch milliseconds (int) are written
    as the seed writes them, ISO-8601 UTC text with milliseconds; anything else as given."""
    out = dict(event)
    for name in ("read_timestamp", "source_timestamp"):
        if isinstance(out.get(name), int) and not isinstance(out.get(name), bool):
            out[name] = _iso_millis(out[name])
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()


def _nullable(t: Any) -> list:
    return ["null", t]


_TS = {"type": "long", "logicalType": "timestamp-millis"}
_METADATA_FIELDS = {
    "mysql": [("log_file", "string"), ("log_position", "long"), ("primary_keys", {"type": "array", "items": "string"}),
              ("is_deleted", "boolean"), ("database", "string"), ("table", "string"), ("change_type", "string")],
    "oracle": [("log_file", "string"), ("scn", "long"), ("row_id", "string"), ("is_deleted", "boolean"),
               ("database", "string"), ("schema", "string"), ("table", "string"), ("change_type", "string"),
               ("tx_id", "string"), ("rs_id", "string"), ("ssn", "long")],
}


def avro_event_schema(source: str, columns: Sequence[tuple[str, Any]], *, name: str = "payload") -> dict:
    """The writer schema of Datastream events of one table: the generic metadata, `source_metadata`
    of `source` ("mysql" or "oracle", every field nullable) and `payload`, a record of `columns`
    ((name, Avro type), in column index order)."""
    if source not in _METADATA_FIELDS:
        raise ValueError(f"source {source!r} is not one of {sorted(_METADATA_FIELDS)}")
    meta = [{"name": n, "type": _nullable(t), "default": None} for n, t in _METADATA_FIELDS[source]]
    return {
        "type": "record", "name": "DatastreamEvent", "namespace": "deltaport.datastream",
        "fields": [
            {"name": "stream_name", "type": _nullable("string"), "default": None},
            {"name": "read_method", "type": "string"},
            {"name": "object", "type": _nullable("string"), "default": None},
            {"name": "schema_key", "type": _nullable("string"), "default": None},
            {"name": "uuid", "type": "string"},
            {"name": "read_timestamp", "type": _nullable(_TS), "default": None},
            {"name": "source_timestamp", "type": _TS},
            {"name": "sort_keys", "type": _nullable({"type": "array", "items": ["string", "long"]}), "default": None},
            {"name": "source_metadata", "type": {"type": "record", "name": f"{source}_source_metadata", "fields": meta}},
            {"name": "payload", "type": {"type": "record", "name": name, "fields": [
                {"name": n, "type": t} for n, t in columns]}},
        ],
    }


def encode_avro_events(schema: Mapping[str, Any], events: Iterable[Mapping[str, Any]], *, codec: str = "null",
                       sync_marker: bytes | None = None) -> bytes:
    """An Avro container file of `events` (timestamps as epoch milliseconds or aware datetimes;
    JSON-style ISO text is converted). `sync_marker` (16 bytes) makes the bytes reproducible."""
    def prepared(e: Mapping[str, Any]) -> dict:
        out = dict(e)
        for n in ("read_timestamp", "source_timestamp"):
            if isinstance(out.get(n), str):
                out[n] = _timestamp_us(out[n], n) // 1000
        meta = dict(out.get("source_metadata") or {})
        if "rowid" in meta and "row_id" not in meta:
            meta["row_id"] = meta.pop("rowid")
        out["source_metadata"] = meta
        return out

    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(dict(schema)), [prepared(e) for e in events], codec=codec,
                    sync_marker=sync_marker)
    return buf.getvalue()
