"""Codec of Prostore `BACKUP_TO_KAFKA` messages (Avro key, Avro container-file values).

What flows through: a backup message's key is an Avro Object Container File holding exactly one
record of `KEY_SCHEMA` (a bare schemaless record of that schema is accepted too); its value is a
container file of changelog records (`CHANGELOG_SCHEMA`) or of table rows (a `row` record with
one `["null", T]` field per column plus `sys_op`). Schemas and field names are the seed's,
verbatim.

Guarantees:
- `decode_backup_key` returns a `BackupKey` or raises `BadAvroKeyError` with the reason (garbage,
  truncated, no record or several, a writer schema whose fields don't fit the key), or its
  subclass `BadKeyNumberError` for a number no writer can send (`resources.codecs.limits`: a
  negative or huge deltaNum, streamNumber/streamTotal/chunkNumber above their bounds, a deltaDate
  outside the years 1..9999); numbers below 1 pass, for the completeness ledger to report.
- `iter_changelog` / `iter_rows` stream record by record; the container header (and, given the
  DDL columns, the writer schema) is checked when they are called, before any record. A value
  that is not a readable container, or breaks mid-way, raises `BadContainerFileError`, also
  from inside the iteration (records already yielded stay yielded: treat the whole message as
  bad). Avro containers do not count their blocks, so a file cut exactly between two blocks
  reads as a shorter valid file: completeness is the key's job (chunk numbers), not this one's.
  A writer schema whose records or array items can take zero bytes is a bad container too
  (`avro_counts`: their counts would be bounded by nothing).
- With DDL columns, `iter_rows` yields canonical Python values (`types.python_value`): a
  TIMESTAMP written as a plain long (the seed's way) and one written as timestamp-micros give the
  same naive UTC datetime.
- Codecs: null and deflate always; snappy when `cramjam` (or python-snappy) is installed,
  otherwise `UnsupportedCodecError` (a deployment problem, not a bad message).
No Dagster, no Kafka client: bytes in, records out. Errors carry no location; the caller adds it.
"""

from __future__ import annotations

import importlib.util
import io
import json
import struct
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
from fastavro.read import LOGICAL_READERS
from fastavro.schema import SchemaParseException

from resources.codecs.types import (
    BadValueError,
    Column,
    avro_raw_value,
    avro_type,
    python_value,
    timestamp_to_micros,
)
from resources.codecs.avro_counts import open_container
from resources.codecs.limits import (
    LONG_MIN,
    MAX_CHUNK_NUMBER,
    MAX_DELTA_NUM,
    MAX_STREAMS,
    MAX_TIMESTAMP_US,
    MIN_TIMESTAMP_US,
    outside,
)
from resources.errors import (
    BadAvroKeyError,
    BadContainerFileError,
    BadKeyNumberError,
    DeltaportError,
    MissingKeyColumnError,
    SchemaMismatchError,
)

MESSAGE_TYPE_DATA = 0
MESSAGE_TYPE_CHANGELOG = 1


@dataclass(frozen=True, order=True)
class BackupKey:
    """One backup message's key: which export run, delta, table, stream and chunk it is."""

    increment_id: str
    message_type: int  # MESSAGE_TYPE_DATA or MESSAGE_TYPE_CHANGELOG
    datamart: str
    delta_num: int
    delta_date: int  # microseconds since the Unix epoch (UTC)
    table_name: str | None  # None for changelog messages
    stream_number: int  # from 1
    stream_total: int
    chunk_number: int  # from 1
    is_last_chunk: bool


# The seed's key schema, verbatim: `logicalType` sits beside the field's type, where Avro
# readers ignore it, so deltaDate reads as a plain long of microseconds.
KEY_SCHEMA: dict = {
    "name": "topicA",
    "type": "record",
    "fields": [
        {"name": "incrementId", "type": "string"},
        {"name": "messageType", "type": "long"},
        {"name": "datamart", "type": "string"},
        {"name": "deltaNum", "type": "long"},
        {"name": "deltaDate", "type": "long", "logicalType": "timestamp-micros"},
        {"name": "tableName", "type": ["null", "string"]},
        {"name": "streamNumber", "type": "long"},
        {"name": "streamTotal", "type": "long"},
        {"name": "chunkNumber", "type": "long"},
        {"name": "isLastChunk", "type": "boolean"},
    ],
}

CHANGELOG_SCHEMA: dict = {
    "type": "record",
    "name": "changeLog",
    "fields": [
        {"name": "changeNum", "type": "long"},
        {"name": "entityName", "type": "string"},
        {"name": "changeQuery", "type": "string"},
    ],
}

MAGIC = b"Obj\x01"
CODECS = ("null", "deflate", "snappy")
DEFAULT_SYNC_INTERVAL = 16_000  # fastavro's default block size in bytes

# What fastavro raises on bytes that are not the Avro they claim to be (measured by truncating
# and bit-flipping containers of each codec): translated at this boundary, never leaked.
_AVRO_ERRORS: tuple[type[BaseException], ...] = (
    EOFError, ValueError, LookupError, OverflowError, struct.error, zlib.error,
    SchemaParseException,
)
try:  # snappy blocks are decompressed by cramjam, whose errors are its own
    import cramjam

    _AVRO_ERRORS += (cramjam.DecompressionError,)
except ImportError:  # pragma: no cover - depends on the environment
    pass

_PARSED_KEY_SCHEMA = fastavro.parse_schema(KEY_SCHEMA)
_PARSED_CHANGELOG_SCHEMA = fastavro.parse_schema(CHANGELOG_SCHEMA)

# Avro field, BackupKey attribute, Avro primitives that hold it.
_KEY_FIELDS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("incrementId", "increment_id", frozenset({"string"})),
    ("messageType", "message_type", frozenset({"long", "int"})),
    ("datamart", "datamart", frozenset({"string"})),
    ("deltaNum", "delta_num", frozenset({"long", "int"})),
    ("deltaDate", "delta_date", frozenset({"long"})),
    ("tableName", "table_name", frozenset({"string"})),
    ("streamNumber", "stream_number", frozenset({"long", "int"})),
    ("streamTotal", "stream_total", frozenset({"long", "int"})),
    ("chunkNumber", "chunk_number", frozenset({"long", "int"})),
    ("isLastChunk", "is_last_chunk", frozenset({"boolean"})),
)
# Avro field, BackupKey attribute, lowest and highest number a writer can send (limits.py).
_KEY_BOUNDS: tuple[tuple[str, str, int, int], ...] = (
    ("deltaNum", "delta_num", 0, MAX_DELTA_NUM),
    ("deltaDate", "delta_date", MIN_TIMESTAMP_US, MAX_TIMESTAMP_US),
    ("streamNumber", "stream_number", LONG_MIN, MAX_STREAMS),
    ("streamTotal", "stream_total", LONG_MIN, MAX_STREAMS),
    ("chunkNumber", "chunk_number", LONG_MIN, MAX_CHUNK_NUMBER),
)


class UnsupportedCodecError(DeltaportError):
    """A container uses a codec whose library is not installed here (snappy needs cramjam)."""


@dataclass(frozen=True)
class ChangelogRecord:
    """One changelog (journal) entry: a DDL statement and its order."""

    change_num: int
    entity_name: str
    change_query: str


# ---------------------------------------------------------------- shared helpers


def _why(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check_codec(codec: str) -> None:
    if codec == "snappy" and not (
        importlib.util.find_spec("cramjam") or importlib.util.find_spec("snappy")
    ):
        raise UnsupportedCodecError(
            "Avro codec 'snappy' needs the 'cramjam' package, not installed"
        )


def _branches(avro_t: Any) -> tuple[bool, list[tuple[str, str | None]]]:
    """(nullable, [(primitive, logical type fastavro applies or None)]) of a field's type.
    A complex branch shows as its own type name ("record", "array", ...)."""
    nullable, out = False, []
    for t in avro_t if isinstance(avro_t, list) else [avro_t]:
        prim, logical = (t.get("type"), t.get("logicalType")) if isinstance(t, dict) else (t, None)
        if not isinstance(prim, str):
            prim, logical = "complex", None
        if prim == "null":
            nullable = True
            continue
        # A logicalType fastavro does not know (or one beside the type) leaves the primitive.
        out.append((prim, logical if f"{prim}-{logical}" in LOGICAL_READERS else None))
    return nullable, out


def _describe(avro_t: Any) -> str:
    return json.dumps(avro_t, ensure_ascii=False, sort_keys=True)


def _as_bytes(data: Any, what: str, error: type[BadAvroKeyError | BadContainerFileError]) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise error(f"{what} is {type(data).__name__}, expected bytes")
    if not data:
        raise error(f"{what} is empty")
    return bytes(data)


def _open_container(data: Any, what: str) -> Any:
    """A fastavro reader over `data` with its header read, or BadContainerFileError."""
    data = _as_bytes(data, what, BadContainerFileError)
    if data[:4] != MAGIC:
        raise BadContainerFileError(
            f"{what} is not an Avro Object Container File (starts with {data[:4]!r}, not {MAGIC!r})"
        )
    try:
        reader = open_container(data)  # its counts bounded by its bytes (resources/codecs/avro_counts.py)
    except _AVRO_ERRORS as exc:
        raise BadContainerFileError(f"unreadable {what} header: {_why(exc)}") from exc
    _check_codec(reader.codec)
    return reader


def _records(reader: Any, what: str) -> Iterator[dict]:
    count = 0
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return
        except _AVRO_ERRORS as exc:
            raise BadContainerFileError(
                f"truncated or corrupt {what} after {count} records: {_why(exc)}"
            ) from exc
        count += 1
        yield record


def _write_container(
    schema: Any,
    records: Iterable[dict],
    codec: str,
    sync_interval: int,
    sync_marker: bytes | None,
) -> bytes:
    if codec not in CODECS:
        raise ValueError(f"codec {codec!r} is not one of {CODECS}")
    if sync_marker is not None and len(sync_marker) != 16:
        raise ValueError(f"sync_marker must be 16 bytes, got {len(sync_marker)}")
    _check_codec(codec)
    buf = io.BytesIO()
    # The sync marker is random per file unless given (Avro's rule); a caller that needs
    # byte-identical output for identical input (the emulator's seeded runs) passes one.
    fastavro.writer(
        buf, schema, records, codec=codec, sync_interval=sync_interval, sync_marker=sync_marker
    )
    return buf.getvalue()


def writer_schema(data: bytes) -> dict:
    """The writer schema in a container's header, as the writer wrote it."""
    reader = _open_container(data, "container")
    try:
        return json.loads(reader.metadata["avro.schema"])
    except _AVRO_ERRORS as exc:  # fastavro parsed it already; kept for odd metadata encodings
        raise BadContainerFileError(f"unreadable writer schema: {_why(exc)}") from exc


# ---------------------------------------------------------------- key


def encode_backup_key(
    key: BackupKey, *, container: bool = True, sync_marker: bytes | None = None
) -> bytes:
    """The key as Prostore writes it: a container file with one record (or, with
    `container=False`, the bare schemaless record)."""
    record = {
        "incrementId": key.increment_id,
        "messageType": key.message_type,
        "datamart": key.datamart,
        "deltaNum": key.delta_num,
        "deltaDate": key.delta_date,
        "tableName": key.table_name,
        "streamNumber": key.stream_number,
        "streamTotal": key.stream_total,
        "chunkNumber": key.chunk_number,
        "isLastChunk": key.is_last_chunk,
    }
    if container:
        return _write_container(
            _PARSED_KEY_SCHEMA, [record], "null", DEFAULT_SYNC_INTERVAL, sync_marker
        )
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PARSED_KEY_SCHEMA, record)
    return buf.getvalue()


def decode_backup_key(data: bytes) -> BackupKey:
    """Decode a backup message key: a container file (any writer schema whose fields hold the
    key's, checked) or a bare record of `KEY_SCHEMA`. Raises BadAvroKeyError."""
    data = _as_bytes(data, "key", BadAvroKeyError)
    if data[:4] == MAGIC:
        record = _key_from_container(data)
    else:
        fo = io.BytesIO(data)
        try:
            record = fastavro.schemaless_reader(fo, _PARSED_KEY_SCHEMA, None)
        except _AVRO_ERRORS as exc:
            raise BadAvroKeyError(
                f"neither an Avro container file (no {MAGIC!r} magic) nor a bare key record: "
                f"{_why(exc)}"
            ) from exc
        if fo.tell() != len(data):
            raise BadAvroKeyError(
                f"neither an Avro container file (no {MAGIC!r} magic) nor a bare key record: "
                f"{len(data) - fo.tell()} bytes left after the record"
            )
    return _key_from_record(record)


def _key_from_container(data: bytes) -> dict:
    try:
        reader = open_container(data)  # extra fields may be any type: their counts bounded too
    except _AVRO_ERRORS as exc:
        raise BadAvroKeyError(f"unreadable key container header: {_why(exc)}") from exc
    _check_key_schema(json.loads(reader.metadata["avro.schema"]))
    try:
        records = list(reader)  # a key holds one small record: counting them all is cheap
    except _AVRO_ERRORS as exc:
        raise BadAvroKeyError(f"truncated or corrupt key container: {_why(exc)}") from exc
    if len(records) != 1:
        raise BadAvroKeyError(f"key container holds {len(records)} records, expected exactly 1")
    return records[0]


def _check_key_schema(schema: Any) -> None:
    fields = {}
    if isinstance(schema, dict):
        fields = {f.get("name"): f for f in schema.get("fields", [])}
    for avro_name, _, holds in _KEY_FIELDS:
        if avro_name not in fields:
            raise BadAvroKeyError(f"key writer schema has no field {avro_name!r}")
        avro_t = fields[avro_name].get("type")
        _, branches = _branches(avro_t)
        if len(branches) != 1 or branches[0][0] not in holds:
            raise BadAvroKeyError(
                f"key field {avro_name!r} has Avro type {_describe(avro_t)}, "
                f"expected {' or '.join(sorted(holds))}"
            )


def _key_from_record(record: Mapping[str, Any]) -> BackupKey:
    values: dict[str, Any] = {}
    for avro_name, attr, _ in _KEY_FIELDS:
        value = record.get(avro_name)
        if value is None and attr != "table_name":
            raise BadAvroKeyError(f"key field {avro_name!r} is null")
        if isinstance(value, uuid.UUID):  # incrementId written with logicalType uuid
            value = str(value)
        if attr == "delta_date" and not isinstance(value, int):  # a timestamp logical type
            value = timestamp_to_micros(value)
        values[attr] = value
    if values["message_type"] not in (MESSAGE_TYPE_DATA, MESSAGE_TYPE_CHANGELOG):
        raise BadAvroKeyError(
            f"messageType {values['message_type']} is neither {MESSAGE_TYPE_DATA} (table data) "
            f"nor {MESSAGE_TYPE_CHANGELOG} (changelog)"
        )
    for avro_name, attr, low, high in _KEY_BOUNDS:
        why = outside(values[attr], low, high, avro_name)
        if why:
            raise BadKeyNumberError(f"{why} (limits: resources/codecs/limits.py)")
    return BackupKey(**values)


# ---------------------------------------------------------------- changelog


def encode_changelog(
    records: Iterable[ChangelogRecord], *, codec: str = "null", sync_marker: bytes | None = None
) -> bytes:
    """A changelog message value: a container file of `CHANGELOG_SCHEMA` records."""
    avro_records = (
        {"changeNum": r.change_num, "entityName": r.entity_name, "changeQuery": r.change_query}
        for r in records
    )
    return _write_container(
        _PARSED_CHANGELOG_SCHEMA, avro_records, codec, DEFAULT_SYNC_INTERVAL, sync_marker
    )


def iter_changelog(data: bytes) -> Iterator[ChangelogRecord]:
    """Stream the records of a changelog message value (header and schema checked now)."""
    reader = _open_container(data, "changelog container")
    schema = json.loads(reader.metadata["avro.schema"])
    fields = {f.get("name"): f.get("type") for f in schema.get("fields", [])}
    for field in CHANGELOG_SCHEMA["fields"]:
        if field["name"] not in fields:
            raise SchemaMismatchError(f"changelog writer schema has no field {field['name']!r}")
        nullable, branches = _branches(fields[field["name"]])
        allowed = {"long", "int"} if field["type"] == "long" else {field["type"]}
        if nullable or len(branches) != 1 or branches[0][0] not in allowed:
            raise SchemaMismatchError(
                f"changelog field {field['name']!r} is {_describe(fields.get(field['name']))} "
                f"in the writer schema, expected {field['type']!r}"
            )
    return (
        ChangelogRecord(r["changeNum"], r["entityName"], r["changeQuery"])
        for r in _records(reader, "changelog container")
    )


# ---------------------------------------------------------------- rows

# What each DDL type may be written as: (Avro primitive, logical type fastavro applies). The
# writer's type must hold every value of the DDL type without loss (int32 in a long, float in
# a double: yes; bigint in an int, a timestamp in timestamp-millis: no).
_HOLDS: dict[str, frozenset[tuple[str, str | None]]] = {
    "bigint": frozenset({("long", None)}),
    "int": frozenset({("long", None)}),
    "int32": frozenset({("int", None), ("long", None)}),
    "boolean": frozenset({("boolean", None)}),
    "float": frozenset({("float", None), ("double", None)}),
    "double": frozenset({("double", None)}),
    "char": frozenset({("string", None)}),
    "varchar": frozenset({("string", None)}),
    "link": frozenset({("string", None)}),
    "uuid": frozenset({("string", None), ("string", "uuid")}),
    "date": frozenset({("int", None), ("int", "date"), ("long", None)}),
    "time": frozenset({("long", None), ("long", "time-micros")}),
    "timestamp": frozenset(
        {("long", None), ("long", "timestamp-micros"), ("long", "local-timestamp-micros")}
    ),
}


def row_avro_schema(columns: Sequence[Column], *, logical_types: bool = True) -> dict:
    """The `row` schema Prostore writes for a table: every column `["null", T]` with an empty
    doc, in DDL order, then `sys_op`. Without logical types, TIMESTAMP is a plain long, etc."""
    fields = [
        {"name": c.name, "type": ["null", avro_type(c, logical_types=logical_types)], "doc": ""}
        for c in columns
    ]
    fields.append({"name": "sys_op", "type": ["null", "int"], "doc": ""})
    return {"type": "record", "name": "row", "fields": fields}


def encode_rows(
    columns: Sequence[Column],
    rows: Iterable[Mapping[str, Any]],
    *,
    logical_types: bool = True,
    codec: str = "null",
    sync_interval: int = DEFAULT_SYNC_INTERVAL,
    sync_marker: bytes | None = None,
) -> bytes:
    """A table-data message value. Each row maps column names to canonical Python values (a
    missing column is null) plus "sys_op" (0 upsert, 1 delete). Rows are consumed lazily."""
    schema = fastavro.parse_schema(row_avro_schema(columns, logical_types=logical_types))
    names = {c.name for c in columns}

    def records() -> Iterator[dict]:
        for row in rows:
            unknown = set(row) - names - {"sys_op"}
            if unknown:
                raise ValueError(f"row has keys that are not columns: {sorted(unknown)}")
            sys_op = row.get("sys_op")
            if sys_op not in (0, 1, None) or isinstance(sys_op, bool):
                raise ValueError(f"sys_op must be 0, 1 or None, got {sys_op!r}")
            record = {c.name: avro_raw_value(c, row.get(c.name)) for c in columns}
            record["sys_op"] = sys_op
            yield record

    return _write_container(schema, records(), codec, sync_interval, sync_marker)


def check_writer_schema(schema: Mapping[str, Any], columns: Sequence[Column]) -> None:
    """Raise SchemaMismatchError unless a row writer schema fits the table's DDL columns: every
    writer field is a DDL column whose values its Avro type can hold, and `sys_op` (int) is there.

    A DDL column absent from the writer schema is allowed (schema evolution: a message written
    before the column was added, or by a writer that omits it); its values are simply absent.
    A primary-key column is not: `check_key_columns` says so.
    """
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise SchemaMismatchError(f"writer schema is not a record: {_describe(schema)[:200]}")
    by_name = {c.name: c for c in columns}
    has_sys_op = False
    for field in schema.get("fields", []):
        name, avro_t = field.get("name"), field.get("type")
        _, branches = _branches(avro_t)
        if name == "sys_op":
            has_sys_op = True
            if len(branches) != 1 or branches[0] not in {("int", None), ("long", None)}:
                raise SchemaMismatchError(f"sys_op has Avro type {_describe(avro_t)}, expected int")
            continue
        column = by_name.get(name)
        if column is None:
            raise SchemaMismatchError(
                f"writer field {name!r} is not a column in the changelog DDL "
                f"(columns: {', '.join(by_name) or 'none'})"
            )
        if len(branches) != 1 or branches[0] not in _HOLDS[column.type]:
            raise SchemaMismatchError(
                f"writer field {name!r} has Avro type {_describe(avro_t)}, "
                f"which cannot hold DDL type {column.type}"
            )
    if not has_sys_op:
        raise SchemaMismatchError("writer schema has no sys_op field")


def check_key_columns(schema: Mapping[str, Any], primary_key: Sequence[str]) -> None:
    """Raise MissingKeyColumnError unless every primary-key column is a field of the row writer
    schema. `check_writer_schema` lets a DDL column be absent (it reads NULL); a key column may
    not: every row of such a value would have a NULL key, which no snapshot can apply."""
    fields = {f.get("name") for f in schema.get("fields", []) if isinstance(f, Mapping)} \
        if isinstance(schema, Mapping) else set()
    missing = [k for k in primary_key if k not in fields]
    if missing:
        raise MissingKeyColumnError(
            f"writer schema lacks primary key column(s) {', '.join(map(repr, missing))} "
            f"(key: {', '.join(primary_key)}): its rows cannot be keyed"
        )


def iter_rows(data: bytes, columns: Sequence[Column] | None = None) -> Iterator[dict]:
    """Stream the rows of a table-data message value, one dict per record, in file order.

    Without `columns`: records as fastavro decodes them. With the DDL `columns`: the writer
    schema is checked first (`check_writer_schema`), then values are canonical Python values and
    each dict holds the writer's fields (a DDL column the writer lacks is not invented).
    """
    reader = _open_container(data, "row container")
    if columns is None:
        return _records(reader, "row container")
    check_writer_schema(json.loads(reader.metadata["avro.schema"]), columns)
    return _normalized(_records(reader, "row container"), {c.name: c for c in columns})


def _normalized(records: Iterator[dict], by_name: dict[str, Column]) -> Iterator[dict]:
    for record in records:
        row = {}
        for name, raw in record.items():
            column = by_name.get(name)
            try:
                row[name] = raw if column is None else python_value(column, raw)
            except BadValueError as exc:
                raise SchemaMismatchError(f"column {name!r}: {exc}") from exc
        yield row
