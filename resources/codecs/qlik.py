"""Codec of a Qlik Replicate / Qlik Talend Data Integration Kafka target: metadata and data messages.

Flow: a reader hands `QlikDecoder.decode(key, value)` the bytes of one Kafka message, in topic
order, and gets back normalized records (`resources.codecs.cdc`): a metadata message gives one
`TableSchema`; a data message gives one `Change` (two for an UPDATE that carries `beforeData`:
a BEFORE_IMAGE, then the UPSERT). The decoder is stateful on purpose: a data message can only be
read with the table structure (column ordinals, key, types) of its table's metadata message, so
the decoder remembers every structure it has seen, keyed by (schema, table, tableVersion) and by
`schemaId`. Source: seeds/002 (Qlik's "Metadata and data messages", machine-translated), digested
in spec/other-cdc-formats.md; where the two differ, the seed wins.

Wire forms accepted, told apart by their first bytes:
- JSON, bare (the seed's fields: a metadata message `{schemaId, lineage, tableStructure,
  dataSchema}` or a data message `{schema, table, headers, data, beforeData}`), or wrapped in
  Replicate's JSON envelope `{"magic": "atMSG", "type": "MD"|"DT", ..., "message": {...}}`.
- Avro, Replicate's binary envelope (starts with the fixed `atMSG`; Qlik's public "Replicate
  envelope" page, not the seed): `message` is Avro binary written with `messageSchema` (embedded)
  or the schema named by `messageSchemaId`: a data message's id is its metadata message's
  `schemaId`, whose `dataSchema` is the writer schema; other ids can be given to the decoder.
- Avro Object Container File (`Obj\\x01`): the seed says only that `dataSchema` is "the Avro
  schema to deserialize data messages" and leaves the Avro envelope open, so a container file is
  accepted whose records have the same fields as the JSON form (metadata or data), one or more.

Decisions where the seed is terse (each pinned by a test):
- Masks (`changeMask`, `columnMask`): hex text, least significant *byte* first (the seed: "с
  младшим байтом вперед"), bits inside a byte as usual, so the first two hex digits are bits 0..7,
  the next two bits 8..15; bit i is the column of ordinal i + 1 (the seed: "0B = 1011 binary:
  ordinals 1, 2 and 4 changed"). Odd-length or non-hex text, or a set bit past the last ordinal,
  raises `QlikBadMaskError`. An empty or null mask is "not given" (full-load rows carry none).
- `captured` = the columns whose columnMask bit is 1; the others are left out of `values`
  entirely (their JSON null is "not captured", never a real NULL). No columnMask: captured None
  (every column in `values` is authoritative). A DELETE carries only the key columns
  (captured = key columns); a table with no key column keeps the whole captured row instead.
  `changeMask` is validated (it must fit) but not used: LOB columns are never in it.
- Order: `order_key(...)` = (changeSequence as an int when it is all digits (it is
  YYYYMMDDHHmmSShh + a 19-digit change number: fixed width, so int order is string order), else
  -1 with the text; missing -2 | the text for a non-numeric sequence | transactionEventCounter or 0
  | a row identity used only when the sequence is missing). Full-load (REFRESH) rows carry no
  changeSequence ("CDC operations only"), so they sort before every CDC change and are told apart
  by "schema.table:key" (a re-delivered copy has the same key: de-duplication still works).
  A BEFORE_IMAGE has its UPDATE's order key; its event_id ends in "#before".
- Values are typed by the metadata column type (INT*/UINT* int, REAL* float, NUMERIC Decimal,
  BOOLEAN bool, DATE date, TIME time, DATETIME naive UTC datetime, STRING/WSTRING/CLOB/NCLOB str,
  BYTES/BLOB bytes from Avro, kept as the received text from JSON, whose encoding the seed does
  not give). Replicate's JSON writes numbers as strings ("2"): both forms are accepted. An unknown
  type name passes its value through unchanged. Column types are rendered SQL-like: "NUMERIC(12,2)",
  "STRING(30)", else the bare name (`base_type` strips the parameters).
- A data message finds its table structure by `headers.externalSchemaId`, else the envelope's
  `messageSchemaId`, else by its `schema`/`table` names (the latest tableVersion seen). An id that
  names no metadata message seen yet is an error, never a guess with another version.
- The Kafka key is not used (Replicate's key is configurable, even absent). A null value
  (tombstone) gives no record.
- Numbers (`resources.codecs.limits`): an INT* value beyond -2^63..2^64-1 is refused before any
  conversion (int() of JSON's `1e99999999` would take days); `tableVersion`, ordinals, key
  positions, `transactionEventCounter` are longs; a `changeSequence` has at most 64 digits.

Errors: every bad input raises one `DecodeError` subclass below, with no location (the reader
pins it on), and leaves the decoder's remembered structures as they were before the call.
Pure: no Dagster, no Kafka client. Masks, order keys and the coercion of values are in
`resources/codecs/qlik_values.py`.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Mapping

import fastavro

from resources.codecs.avro_counts import check_counts, open_container
from resources.codecs.cdc import BEFORE_IMAGE, DELETE, UPSERT, Change, Record, TableSchema
from resources.codecs.json_text import BEYOND_LIMITS
from resources.codecs.limits import LONG_MAX, LONG_MIN, MAX_SEQUENCE_DIGITS
from resources.codecs.qlik_values import (
    _DIGITS,
    _LENGTH_TYPES,
    QlikBadValueError,
    coerce,
    decode_mask,
    order_key,
    parse_datetime,
    row_identity,
    to_micros,
)
from resources.errors import BadContainerFileError, BadJsonError, DecodeError, SchemaMismatchError

SOURCE = "qlik"
MAGIC = b"atMSG"
OPERATIONS = ("REFRESH", "INSERT", "UPDATE", "DELETE")

# Replicate's binary envelope, from Qlik's "The Replicate envelope" page.
ENVELOPE_SCHEMA = {
    "type": "record", "name": "MessageEnvelope", "fields": [
        {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 5}},
        {"name": "type", "type": "string"},
        {"name": "headers", "type": ["null", {"type": "map", "values": "string"}]},
        {"name": "messageSchemaId", "type": ["null", "string"]},
        {"name": "messageSchema", "type": ["null", "string"]},
        {"name": "message", "type": "bytes"},
    ],
}
_ENVELOPE = fastavro.parse_schema(ENVELOPE_SCHEMA)


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


class QlikBadJsonError(BadJsonError):
    """The value is not UTF-8 JSON."""

    kind = "qlik_bad_json"


class QlikBadAvroError(BadContainerFileError):
    """The value looks like Avro (container file or binary envelope) but cannot be read."""

    kind = "qlik_bad_avro"


class QlikBadEnvelopeError(DecodeError):
    """The message is neither a metadata nor a data message, or a field has the wrong shape."""

    kind = "qlik_bad_envelope"


class QlikBadMetadataError(DecodeError):
    """A metadata message's table structure does not make sense (ordinals, key positions, ...)."""

    kind = "qlik_bad_metadata"


class QlikMissingMetadataError(DecodeError):
    """A data message arrived before the metadata message of its table (structure version)."""

    kind = "qlik_no_metadata"


class QlikUnknownOperationError(DecodeError):
    """headers.operation is none of REFRESH, INSERT, UPDATE, DELETE."""

    kind = "qlik_unknown_operation"


class QlikSchemaMismatchError(SchemaMismatchError):
    """The data does not fit its table's metadata (unknown column, missing key column, ...)."""

    kind = "qlik_schema_mismatch"


# ---------------------------------------------------------------------------------------------
# Table structures
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QlikColumn:
    name: str
    ordinal: int
    type: str  # rendered, e.g. "NUMERIC(12,2)"
    key_position: int  # primaryKeyPosition, 0 = not in the key


@dataclass(frozen=True)
class QlikTable:
    """One structure version of one table, from its metadata message."""

    schema: str | None
    table: str
    version: int
    schema_id: str | None
    columns: tuple[QlikColumn, ...]  # in ordinal order: columns[i].ordinal == i + 1
    key_columns: tuple[str, ...]
    data_schema: dict | None
    table_schema: TableSchema


def _structure(t: QlikTable) -> tuple:
    """What makes two metadata messages the same table version (their data schema text aside)."""
    return (t.schema, t.table, t.version, t.schema_id, t.columns, t.key_columns)


def _render_type(type_name: str, props: Mapping[str, Any]) -> str:
    base = type_name.strip().upper()
    precision, scale, length = props.get("precision"), props.get("scale"), props.get("length")
    if base == "NUMERIC" and isinstance(precision, int) and precision > 0:
        return f"NUMERIC({precision},{scale if isinstance(scale, int) else 0})"
    if base in _LENGTH_TYPES and isinstance(length, int) and length > 0:
        return f"{base}({length})"
    return base


def _int(value: Any, what: str, error: type[DecodeError]) -> int:
    """A long, as a number or decimal digits; anything else (a 5000-digit number too) is `error`."""
    if isinstance(value, bool):
        raise error(f"{what} must be an integer, got a boolean")
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()) and len(value.strip()) <= 19:
        value = int(value)
    if isinstance(value, int) and LONG_MIN <= value <= LONG_MAX:
        return value
    raise error(f"{what} must be an integer of 64 bits, got {str(value)[:40]!r}")


def parse_metadata(body: Mapping[str, Any]) -> QlikTable:
    """A metadata message body -> its table structure. Raises QlikBadMetadataError."""
    lineage, structure = body.get("lineage"), body.get("tableStructure")
    if not isinstance(lineage, Mapping) or not isinstance(structure, Mapping):
        raise QlikBadMetadataError("lineage and tableStructure must be objects")
    schema, table = lineage.get("schema"), lineage.get("table")
    if not isinstance(table, str) or not table:
        raise QlikBadMetadataError(f"lineage.table must be a non-empty string, got {table!r}")
    if schema is not None and not isinstance(schema, str):
        raise QlikBadMetadataError(f"lineage.schema must be a string, got {schema!r}")
    version = _int(lineage.get("tableVersion"), "lineage.tableVersion", QlikBadMetadataError)
    raw_columns = structure.get("tableColumns")
    if not isinstance(raw_columns, Mapping) or not raw_columns:
        raise QlikBadMetadataError(f"tableStructure.tableColumns of {table} must be a non-empty object")
    columns = []
    for name, props in raw_columns.items():
        if not isinstance(props, Mapping) or not isinstance(props.get("type"), str):
            raise QlikBadMetadataError(f"column {name!r} of {table} needs an object with a string 'type'")
        ordinal = _int(props.get("ordinal"), f"ordinal of column {name!r}", QlikBadMetadataError)
        key_pos = props.get("primaryKeyPosition")
        key_pos = 0 if key_pos is None else _int(key_pos, f"primaryKeyPosition of column {name!r}", QlikBadMetadataError)
        columns.append(QlikColumn(name, ordinal, _render_type(props["type"], props), key_pos))
    columns.sort(key=lambda c: c.ordinal)
    if [c.ordinal for c in columns] != list(range(1, len(columns) + 1)):
        raise QlikBadMetadataError(
            f"ordinals of {table} must be 1..{len(columns)}, got {sorted(c.ordinal for c in columns)}"
        )
    keyed = sorted((c for c in columns if c.key_position > 0), key=lambda c: c.key_position)
    if len({c.key_position for c in keyed}) != len(keyed):
        raise QlikBadMetadataError(f"two key columns of {table} share a primaryKeyPosition")
    data_schema = body.get("dataSchema")
    if isinstance(data_schema, str) and data_schema.strip():
        try:
            data_schema = json.loads(data_schema)
        except ValueError as exc:
            raise QlikBadMetadataError(f"dataSchema of {table} is not JSON: {exc}") from None
    elif not data_schema:
        data_schema = None
    if data_schema is not None and not isinstance(data_schema, dict):
        raise QlikBadMetadataError(f"dataSchema of {table} must be an Avro schema object")
    schema_id = body.get("schemaId")
    if schema_id is not None and not isinstance(schema_id, str):
        raise QlikBadMetadataError(f"schemaId must be a string, got {schema_id!r}")
    keys = tuple(c.name for c in keyed)
    ts = TableSchema(SOURCE, schema, table, tuple((c.name, c.type) for c in columns), keys, version, data_schema)
    return QlikTable(schema, table, version, schema_id or None, tuple(columns), keys, data_schema, ts)


# ---------------------------------------------------------------------------------------------
# The decoder
# ---------------------------------------------------------------------------------------------


def _is_metadata(body: Mapping) -> bool:
    return "lineage" in body and "tableStructure" in body


def _is_data(body: Mapping) -> bool:
    return "headers" in body and ("data" in body or "beforeData" in body)


class QlikDecoder:
    """Decodes one Qlik Kafka message at a time, remembering every table structure seen.

    `message_schemas`: extra Avro schemas by id, for binary envelopes whose `messageSchemaId`
    names a schema this decoder cannot learn from a metadata message (Replicate's own metadata
    message schema, a registry's schemas)."""

    def __init__(self, *, message_schemas: Mapping[str, dict | str] | None = None):
        self._by_version: dict[tuple[str | None, str, int], QlikTable] = {}
        self._latest: dict[tuple[str | None, str], QlikTable] = {}
        self._by_id: dict[str, QlikTable] = {}
        self._schemas: dict[str, Any] = {}
        for sid, schema in (message_schemas or {}).items():
            self._schemas[sid] = fastavro.parse_schema(json.loads(schema) if isinstance(schema, str) else schema)

    # -- what has been learned -----------------------------------------------------------------
    def table(self, schema: str | None, table: str, version: int | None = None) -> QlikTable | None:
        """The structure of `schema.table` at `version` (the latest seen when None)."""
        if version is None:
            return self._latest.get((schema, table))
        return self._by_version.get((schema, table, version))

    def table_by_schema_id(self, schema_id: str) -> QlikTable | None:
        return self._by_id.get(schema_id)

    # -- decoding ------------------------------------------------------------------------------
    def decode(self, key: bytes | None, value: bytes | None) -> list[Record]:
        """Records of one Kafka message (key unused). Raises a DecodeError subclass on bad input,
        leaving the remembered structures untouched."""
        if value is None:
            return []
        saved = (dict(self._by_version), dict(self._latest), dict(self._by_id), dict(self._schemas))
        try:
            try:
                return self._decode(bytes(value))
            except (TypeError, ValueError, KeyError, AttributeError, IndexError, ArithmeticError,
                    RecursionError) as exc:
                # A field of an unexpected shape that no check names: still bad input, typed.
                raise QlikBadEnvelopeError(f"malformed message ({type(exc).__name__}: {exc})") from None
        except BaseException:
            self._by_version, self._latest, self._by_id, self._schemas = saved
            raise

    def _decode(self, value: bytes) -> list[Record]:
        if value.startswith(b"Obj\x01"):
            try:
                records = list(open_container(value))  # its counts bounded by its bytes (avro_counts.py)
            except Exception as exc:  # fastavro raises many types for corrupt input
                raise QlikBadAvroError(f"unreadable Avro container file: {exc}") from None
            out: list[Record] = []
            for record in records:
                if not isinstance(record, dict):
                    raise QlikBadEnvelopeError("an Avro container record must be a record")
                out += self._decode_body(record, expected=None, envelope_id=None)
            return out
        if value.startswith(MAGIC):
            return self._decode_binary_envelope(value)
        try:
            text = value.decode("utf-8")
            if text.startswith("\ufeff"):
                text = text[1:]
            obj = json.loads(text, parse_float=Decimal)
        except (UnicodeDecodeError, *BEYOND_LIMITS) as exc:
            raise QlikBadJsonError(f"not UTF-8 JSON: {str(exc)[:200]}") from None
        if not isinstance(obj, dict):
            raise QlikBadEnvelopeError(f"a Qlik message is a JSON object, got {type(obj).__name__}")
        if "magic" in obj:  # Replicate's JSON envelope
            if obj.get("magic") != MAGIC.decode():
                raise QlikBadEnvelopeError(f"envelope magic is {obj.get('magic')!r}, expected 'atMSG'")
            kind, message = obj.get("type"), obj.get("message")
            if kind not in ("MD", "DT"):
                raise QlikBadEnvelopeError(f"envelope type is {kind!r}, expected 'MD' or 'DT'")
            if not isinstance(message, dict):
                raise QlikBadEnvelopeError("envelope message must be a JSON object")
            return self._decode_body(message, expected=kind, envelope_id=obj.get("messageSchemaId") or None)
        return self._decode_body(obj, expected=None, envelope_id=None)

    def _decode_binary_envelope(self, value: bytes) -> list[Record]:
        buf = io.BytesIO(value)
        try:
            env = fastavro.schemaless_reader(buf, _ENVELOPE, None)
        except Exception as exc:
            raise QlikBadAvroError(f"unreadable Replicate envelope: {exc}") from None
        if buf.tell() != len(value):
            raise QlikBadAvroError(f"{len(value) - buf.tell()} bytes after the Replicate envelope")
        if env["magic"] != MAGIC:
            raise QlikBadEnvelopeError(f"envelope magic is {env['magic']!r}, expected b'atMSG'")
        kind, schema_id = env["type"], env["messageSchemaId"]
        if kind not in ("MD", "DT"):
            raise QlikBadEnvelopeError(f"envelope type is {kind!r}, expected 'MD' or 'DT'")
        if env["messageSchema"]:
            try:
                embedded = json.loads(env["messageSchema"])
                check_counts(embedded)  # UnboundedCounts, a ValueError: refused below as any bad schema
                writer = fastavro.parse_schema(embedded)
            except Exception as exc:
                raise QlikBadAvroError(f"embedded messageSchema is not an Avro schema: {exc}") from None
        elif schema_id and schema_id in self._schemas:
            writer = self._schemas[schema_id]
        elif schema_id:
            raise QlikMissingMetadataError(
                f"messageSchemaId {schema_id!r} names no schema seen yet (no metadata message with that schemaId)"
            )
        else:
            raise QlikBadEnvelopeError("envelope has neither messageSchema nor messageSchemaId")
        body_buf = io.BytesIO(env["message"])
        try:
            body = fastavro.schemaless_reader(body_buf, writer, None)
        except Exception as exc:
            raise QlikBadAvroError(f"envelope message does not fit its schema: {exc}") from None
        if body_buf.tell() != len(env["message"]):
            raise QlikBadAvroError("envelope message has bytes its schema does not read (wrong schema?)")
        if not isinstance(body, dict):
            raise QlikBadEnvelopeError("envelope message must be a record")
        return self._decode_body(body, expected=kind, envelope_id=schema_id or None)

    def _decode_body(self, body: Mapping[str, Any], *, expected: str | None, envelope_id: str | None) -> list[Record]:
        is_md, is_dt = _is_metadata(body), _is_data(body)
        if is_md == is_dt:
            what = "both" if is_md else "neither"
            raise QlikBadEnvelopeError(
                f"message is {what} a metadata message (lineage, tableStructure) {'and' if is_md else 'nor'} "
                f"a data message (headers, data); fields: {sorted(body)[:12]}"
            )
        if expected is not None and (expected == "MD") != is_md:
            what = "metadata" if is_md else "data"
            raise QlikBadEnvelopeError(f"envelope type {expected} but the message is a {what} message")
        if is_md:
            return [self._learn(parse_metadata(body))]
        return self._data(body, envelope_id)

    def _learn(self, t: QlikTable) -> TableSchema:
        # A schema id, or a table version, names one structure: a second, different structure
        # under the same name is a damaged copy (or a foreign task), refused so that it cannot
        # redefine the table for the good data messages after it. An identical copy is fine.
        for name, known in ((f"schema id {t.schema_id!r}", self._by_id.get(t.schema_id) if t.schema_id else None),
                            (f"{t.schema}.{t.table} version {t.version}",
                             self._by_version.get((t.schema, t.table, t.version)))):
            if known is not None and _structure(known) != _structure(t):
                raise QlikBadMetadataError(
                    f"metadata message redefines {name} (known as {known.schema}.{known.table} version "
                    f"{known.version}, {len(known.columns)} columns) with another structure; the first stands")
        self._by_version[(t.schema, t.table, t.version)] = t
        latest = self._latest.get((t.schema, t.table))
        if latest is None or t.version >= latest.version:
            self._latest[(t.schema, t.table)] = t
        if t.schema_id:
            self._by_id[t.schema_id] = t
            if t.data_schema is not None:
                try:
                    check_counts(t.data_schema)  # a schema no envelope may be read by is not kept
                    self._schemas[t.schema_id] = fastavro.parse_schema(t.data_schema)
                except Exception:
                    pass  # only needed for binary envelopes; a JSON-only stream may carry any text here
        return t.table_schema

    def _resolve(self, body: Mapping[str, Any], headers: Mapping[str, Any], envelope_id: str | None) -> QlikTable:
        schema, table = body.get("schema"), body.get("table")
        if (table is not None and not isinstance(table, str)) or (schema is not None and not isinstance(schema, str)):
            raise QlikBadEnvelopeError(f"schema and table must be strings, got {schema!r}, {table!r}")
        ids = [i for i in (headers.get("externalSchemaId"), envelope_id) if i]
        if any(not isinstance(i, str) for i in ids):
            raise QlikBadEnvelopeError(f"a schema id must be a string, got {ids!r}")
        for sid in ids:
            found = self._by_id.get(sid)
            if found is not None:
                named = (table, found.schema if schema is None else schema)
                if table is not None and (found.table, found.schema) != named:
                    raise QlikBadEnvelopeError(
                        f"message names {schema}.{table} but schema id {sid!r} is {found.schema}.{found.table}"
                    )
                return found
        if ids:
            raise QlikMissingMetadataError(
                f"data message of {schema}.{table} names schema id {ids[0]!r}, "
                "but no metadata message with that schemaId was seen"
            )
        if not table:
            raise QlikBadEnvelopeError("data message names no table (no table field, externalSchemaId or messageSchemaId)")
        found = self._latest.get((schema, table))
        if found is None:
            raise QlikMissingMetadataError(f"data message of {schema}.{table} before any metadata message of that table")
        return found

    def _data(self, body: Mapping[str, Any], envelope_id: str | None) -> list[Record]:
        headers = body.get("headers")
        if not isinstance(headers, Mapping):
            raise QlikBadEnvelopeError("headers must be an object")
        op = headers.get("operation")
        if op not in OPERATIONS:
            raise QlikUnknownOperationError(f"operation {op!r} is none of {', '.join(OPERATIONS)}")
        t = self._resolve(body, headers, envelope_id)
        data, before = body.get("data"), body.get("beforeData")
        if (data is None and op != "DELETE") or (data is not None and not isinstance(data, Mapping)):
            raise QlikBadEnvelopeError(f"data of a {op} must be an object, got {type(data).__name__}")
        if before is not None and not isinstance(before, Mapping):
            raise QlikBadEnvelopeError(f"beforeData must be an object or null, got {type(before).__name__}")
        data = data or {}
        names = {c.name for c in t.columns}
        for part, row in (("data", data), ("beforeData", before or {})):
            unknown = sorted(set(row) - names)
            if unknown:
                raise QlikSchemaMismatchError(
                    f"{part} of {t.schema}.{t.table} has columns {unknown} not in tableVersion {t.version}"
                )
        n = len(t.columns)
        column_mask = decode_mask(headers.get("columnMask"), n)
        decode_mask(headers.get("changeMask"), n)  # must fit too; not used (LOBs are never in it)
        captured = None if column_mask is None else frozenset(t.columns[o - 1].name for o in column_mask)
        types = {c.name: c.type for c in t.columns}

        def typed(row: Mapping[str, Any], cols, strict: bool) -> dict[str, Any]:
            out = {}
            for name in cols:
                if name not in row:
                    if strict:
                        raise QlikSchemaMismatchError(
                            f"column {name} of {t.schema}.{t.table} is captured (columnMask) but absent from data"
                        )
                    continue
                try:
                    out[name] = coerce(types[name], row[name])
                except (ValueError, TypeError, ArithmeticError) as exc:  # InvalidOperation, OverflowError
                    raise QlikBadValueError(f"column {name} ({types[name]}) of {t.table}: {exc}") from None
            return out

        ordered = [c.name for c in t.columns]
        if op == "DELETE" and t.key_columns:
            if captured is not None and not set(t.key_columns) <= captured:
                raise QlikSchemaMismatchError(f"DELETE of {t.table}: key columns not all set in columnMask")
            values, captured = typed(data, t.key_columns, True), frozenset(t.key_columns)
        elif captured is None:
            values = typed(data, [c for c in ordered if c in data], False)
        else:
            values = typed(data, [c for c in ordered if c in captured], True)
        missing_key = [k for k in t.key_columns if values.get(k) is None]
        if missing_key:
            raise QlikSchemaMismatchError(
                f"{op} of {t.schema}.{t.table} carries no value for key column(s) {missing_key}"
            )

        seq = headers.get("changeSequence")
        if seq is not None and not isinstance(seq, str):
            seq = str(seq)
        if seq is not None and len(seq.strip()) > MAX_SEQUENCE_DIGITS and _DIGITS.fullmatch(seq.strip()):
            raise QlikBadEnvelopeError(f"changeSequence has {len(seq.strip())} digits, more than {MAX_SEQUENCE_DIGITS}")
        counter = headers.get("transactionEventCounter")
        counter = None if counter is None else _int(counter, "transactionEventCounter", QlikBadEnvelopeError)
        row_id = row_identity(t.schema, t.table, {k: values[k] for k in t.key_columns} if t.key_columns else values)
        key = order_key(seq, counter, row_id)
        event_id = f"{seq}:{counter or 0}" if (seq or "").strip() else "refresh:" + row_id
        last = headers.get("transactionLastEvent")
        if isinstance(last, str) and last.strip().lower() in ("true", "false"):
            last = last.strip().lower() == "true"
        if last is not None and not isinstance(last, bool):
            raise QlikBadEnvelopeError(f"transactionLastEvent must be a boolean, got {last!r}")
        ts = headers.get("timestamp")
        try:
            event_time = to_micros(parse_datetime(ts)) if isinstance(ts, str) and ts.strip() else None
        except ValueError as exc:
            raise QlikBadValueError(f"headers.timestamp: {exc}") from None
        txn = headers.get("transactionId")
        common = dict(
            source=SOURCE, namespace=t.schema, table=t.table, key_columns=t.key_columns, order_key=key,
            column_types=types, transaction_id=str(txn) if txn not in (None, "") else None,
            last_in_transaction=last, event_time_us=event_time, is_backfill=op == "REFRESH", source_op=op,
        )
        out: list[Record] = []
        if op == "UPDATE" and before is not None:
            cols = ordered if captured is None else [c for c in ordered if c in captured]
            before_values = typed(before, cols, False)
            out.append(Change(operation=BEFORE_IMAGE, values=before_values, captured=frozenset(before_values)
                              if captured is not None else None, event_id=event_id + "#before", **common))
        out.append(Change(operation=DELETE if op == "DELETE" else UPSERT, values=values, captured=captured,
                          event_id=event_id, **common))
        return out
