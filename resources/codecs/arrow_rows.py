"""Table-data message values decoded straight to Arrow, natively (polars), checked by fastavro.

What flows through: a backup table-data value (an Avro Object Container File of `row` records,
see `backup.py`) and the table's DDL columns go in; one `pyarrow.Table` comes out whose schema is
exactly `arrow_schema(columns)`: every DDL column in DDL order with `types.arrow_type`, then
`sys_op` as int32. `rows_to_arrow_many` does the same for the chunks of a delta, concatenated.

Why polars: `pl.read_avro` decodes 10-18x faster than fastavro record by record, on one core
(bench/avro_decode.py). fastavro (`backup.iter_rows`) stays the reference: this module gives the
*same answer* as `iter_rows(data, columns)` through `types.python_value`, row for row, rows or
error, for every valid input; only the speed differs (and the native path needs no cramjam for
snappy).

How the answer is kept the same:
- The container header is parsed here, and the writer schema is validated by fastavro and
  checked against the DDL by `backup.check_writer_schema` once per (schema, DDL), cached: every
  chunk of a table carries the same schema. Every `logicalType` is then stripped from the schema
  handed to polars. Logical types only annotate the primitive encoding, so the blocks are
  untouched and polars yields raw primitives (days, µs, strings); the conversion to the DDL's
  Arrow type, with `python_value`'s range checks, is done here by DDL type, so annotated, plain
  and beside-the-type annotated schemas give one answer.
- The block headers are walked (a few bytes per block) to count the records; polars must return
  exactly that many rows, and a block may claim no more records than its uncompressed bytes
  (`avro_counts.block_holds`: polars reserves room for the claim, and 10^12 aborted the process).
- Found by testing polars 1.44.2 on valid input (tests/unit/test_arrow_rows.py pins each one):
  * a container without records fails in polars with deflate and panics with snappy: answered
    here (an empty table), polars is not called;
  * a block of 0 records makes polars stop silently, dropping the blocks after it: such blocks
    are cut out before polars sees the file;
  * an out-of-range `time-micros` value comes back as a silent null, and `timestamp-micros` as a
    zoned type: hence the stripping of logical types;
  * codecs other than null, deflate, snappy (bzip2, xz, ...) are not refused: polars returns the
    compressed bytes decoded as records. They go to fastavro.
  Read correctly as they are: "doc"/"default"/"aliases"/"order" attributes, namespaces, extra
  metadata, ["long","null"] and ["null","long"] unions and bare types, non-ASCII text, many
  blocks, and the null, deflate and snappy codecs.
- Whatever the native path does not do exactly goes to fastavro for that value, whose verdict
  (rows or error) stands, and `on_fallback(reason)` is told: any polars error or panic (corrupt
  or truncated input, so the error raised is fastavro's), a value out of its column's range (the
  reference error is fastavro's), a `uuid` with the uuid logical type not in canonical form
  (fastavro rewrites it through `uuid.UUID`) or with non-ASCII characters (`str.lower` rules),
  and a snappy block with a wrong CRC, which polars refuses and fastavro, never reading the CRC,
  accepts.
- Corrupt input polars does not notice (measured by bit-flip fuzzing; needs a second decode to
  catch, so it is documented instead): a union branch index beyond the union is read as the
  value branch (fastavro refuses it), and a boolean byte other than 0 or 1 reads False (fastavro:
  True; Java Avro: False). Kafka's record-batch CRC keeps such bytes out of transit; only a
  broken writer produces them.
- Errors: BadContainerFileError (not a container, truncated, corrupt), SchemaMismatchError
  (writer schema or a value does not fit the DDL), UnsupportedCodecError (fastavro needed a codec
  library that is missing). Avro containers do not count their blocks, so a value cut exactly
  between two blocks reads as a shorter valid file, as with `iter_rows`. A polars panic is caught,
  but Rust's panic hook has already printed it to stderr.
No Dagster, no Kafka, no Spark: bytes in, Arrow out. Errors carry no location; the caller adds it.
"""

from __future__ import annotations

import copy
import functools
import io
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import fastavro
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from fastavro.schema import SchemaParseException
from polars.exceptions import PanicException

from resources.codecs.avro_counts import block_holds
from resources.codecs.backup import MAGIC, check_writer_schema, iter_rows
from resources.codecs.types import Column, arrow_type
from resources.errors import BadContainerFileError, DecodeError, SchemaMismatchError

SYS_OP = "sys_op"
# Codecs polars decodes correctly. Any other codec goes to fastavro: polars 1.44 reads a bzip2 or
# xz container without an error and returns the *compressed* bytes decoded as records.
NATIVE_CODECS = frozenset({"null", "deflate", "snappy"})

# Inclusive ranges of raw Avro values that `types.python_value` accepts, per DDL type.
_INT32 = (-(2**31), 2**31 - 1)
_RAW_RANGE: dict[str, tuple[int, int]] = {
    "int32": _INT32,
    "date": (-719_162, 2_932_896),  # days: 0001-01-01 .. 9999-12-31
    "time": (0, 86_399_999_999),  # µs since midnight
    "timestamp": (-62_135_596_800_000_000, 253_402_300_799_999_999),  # µs: years 1 .. 9999
}
_CANONICAL_UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_MAX_VARINT_BYTES = 10  # a zig-zag long never needs more

# polars raises its own exceptions, OSError ("failed to fill whole buffer") on truncation, and
# pyo3's PanicException on some corrupt inputs. PanicException derives from BaseException, not
# Exception, so it is named here; KeyboardInterrupt and SystemExit still pass through.
_POLARS_ERRORS: tuple[type[BaseException], ...] = (Exception, PanicException)

OnFallback = Callable[[str], None]


class _Fallback(Exception):
    """The native path cannot give the reference answer for this value; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def arrow_schema(columns: Sequence[Column]) -> pa.Schema:
    """The schema of every decoded table: DDL columns in DDL order, then sys_op (int32)."""
    return pa.schema(
        [pa.field(c.name, arrow_type(c)) for c in columns] + [pa.field(SYS_OP, pa.int32())]
    )


def rows_to_arrow(
    data: bytes, columns: Sequence[Column], *, on_fallback: OnFallback | None = None
) -> pa.Table:
    """Decode one table-data value to Arrow (schema `arrow_schema(columns)`).

    A DDL column the writer schema lacks is all null (schema evolution); a writer field that is
    not a DDL column raises SchemaMismatchError. `on_fallback(reason)` is called when the value
    had to be decoded by fastavro instead (for logging and counting; the result is the same).
    """
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    header = _read_header(data)
    plan = _plan(header.meta["avro.schema"], tuple(columns))
    try:
        return _native(data, header, plan, columns)
    except _Fallback as why:
        if on_fallback is not None:
            on_fallback(why.reason)
        return _via_fastavro(data, columns)


def rows_to_arrow_many(
    many: Iterable[bytes], columns: Sequence[Column], *, on_fallback: OnFallback | None = None
) -> pa.Table:
    """Decode the values of many chunks (of one table, with one DDL) into one table, in order.
    An error names the chunk (0-based) in its reason. The table keeps one Arrow chunk per value."""
    tables = []
    for index, data in enumerate(many):
        try:
            tables.append(rows_to_arrow(data, columns, on_fallback=on_fallback))
        except DecodeError as exc:
            raise type(exc)(f"chunk {index}: {exc.reason}", location=exc.location,
                            part=exc.part) from exc
    if not tables:
        return arrow_schema(columns).empty_table()
    return pa.concat_tables(tables)


def container_record_count(data: bytes) -> int:
    """Records in a container file, from its header and block headers only (no decoding):
    a cheap structural check for an indexer. Truncation anywhere but exactly between two
    blocks, a wrong sync marker or a garbled header raise BadContainerFileError."""
    return container_outline(data)[0]


def container_outline(data: bytes) -> tuple[int, bytes]:
    """`container_record_count` and the writer schema's JSON as the header holds it (not parsed):
    what an indexer keeps to check the value against the DDL later (`check_row_schema`)."""
    header = _read_header(data)
    try:
        total, _ = _walk_blocks(data, header)
    except _Fallback as exc:
        raise BadContainerFileError(f"container file is damaged: {exc.reason}") from None
    return total, header.meta["avro.schema"]


def check_row_schema(schema_json: bytes, columns: Sequence[Column]) -> None:
    """What reading a value with this writer schema as the DDL's `columns` would refuse before
    any row: an invalid Avro schema (BadContainerFileError) or one that does not fit the DDL
    (SchemaMismatchError). The decoders' own check, cached per (schema, DDL)."""
    _plan(schema_json, tuple(columns))


# ---------------------------------------------------------------- header


class _Header(NamedTuple):
    meta: dict[str, bytes]  # the metadata map; "avro.schema" is always there
    codec: str
    sync: bytes
    end: int  # offset of the first block


def _read_header(data: Any) -> _Header:
    """Parse a container header (magic, metadata map, sync marker); BadContainerFileError."""
    if not isinstance(data, bytes):
        raise BadContainerFileError(f"row container is {type(data).__name__}, expected bytes")
    if not data:
        raise BadContainerFileError("row container is empty")
    if data[:4] != MAGIC:
        raise BadContainerFileError(
            f"row container is not an Avro Object Container File "
            f"(starts with {data[:4]!r}, not {MAGIC!r})"
        )
    pos, meta = 4, {}
    try:
        while True:
            count, pos = _read_long(data, pos)
            if count == 0:
                break
            if count < 0:  # a negative count is followed by the block's size in bytes
                count = -count
                _, pos = _read_long(data, pos)
            for _ in range(count):
                key, pos = _read_bytes(data, pos)
                value, pos = _read_bytes(data, pos)
                meta[key.decode("utf-8")] = value
        sync = data[pos:pos + 16]
        if len(sync) != 16:
            raise ValueError("no sync marker after the metadata")
        if "avro.schema" not in meta:
            raise ValueError("no avro.schema in the metadata")
        codec = meta.get("avro.codec", b"null").decode("utf-8")
    except (ValueError, IndexError) as exc:  # UnicodeDecodeError included
        raise BadContainerFileError(f"unreadable row container header: {exc}") from exc
    return _Header(meta, codec, sync, pos + 16)


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    for _ in range(_MAX_VARINT_BYTES):
        byte = data[pos]  # IndexError past the end: truncated
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def _read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = _read_long(data, pos)
    if size < 0 or pos + size > len(data):
        raise ValueError(f"metadata entry of {size} bytes does not fit the header")
    return data[pos:pos + size], pos + size


def _write_long(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Plan(NamedTuple):
    stripped_schema: bytes | None  # the schema without logical types, None if it had none
    logical: dict[str, str | None]  # field -> logical type fastavro applies (see _logical_types)


@functools.lru_cache(maxsize=256)
def _plan(schema_json: bytes, columns: tuple[Column, ...]) -> _Plan:
    """Validate a writer schema once per (schema, DDL): every chunk of a table carries the same
    schema, so parsing and checking it per message would cost ~15% of the decode."""
    try:
        schema = json.loads(schema_json)
        # fastavro validates the schema as the reference reader would: an invalid Avro schema
        # is a bad container (iter_rows says so), not a schema mismatch.
        fastavro.parse_schema(copy.deepcopy(schema))
    except (ValueError, LookupError, TypeError, AttributeError, SchemaParseException) as exc:
        raise BadContainerFileError(
            f"unreadable row container header: {type(exc).__name__}: {exc}"
        ) from exc
    check_writer_schema(schema, columns)
    stripped = json.dumps(_strip(schema)).encode() if b"logicalType" in schema_json else None
    return _Plan(stripped, _logical_types(schema))


def _without_logical_types(data: bytes, header: _Header, stripped_schema: bytes) -> bytes:
    """The same container with every logicalType removed from its schema (blocks untouched)."""
    meta = dict(header.meta, **{"avro.schema": stripped_schema})
    parts = [MAGIC, _write_long(len(meta))]
    for key, value in meta.items():
        raw_key = key.encode("utf-8")
        parts += [_write_long(len(raw_key)), raw_key, _write_long(len(value)), value]
    parts += [b"\x00", header.sync, memoryview(data)[header.end:]]
    return b"".join(parts)


def _strip(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip(v) for v in schema]
    return schema


def _logical_types(schema: dict) -> dict[str, str | None]:
    """Field name -> the logicalType *inside* its (non-null) type: the one fastavro applies.
    One beside the type (on the field itself) is ignored by fastavro and by this module."""
    out: dict[str, str | None] = {}
    for field in schema.get("fields", []):
        types = field.get("type")
        logical = None
        for t in types if isinstance(types, list) else [types]:
            if isinstance(t, dict) and t.get("logicalType"):
                logical = t["logicalType"]
        out[field["name"]] = logical
    return out


# ---------------------------------------------------------------- native (polars) path


def _native(data: bytes, header: _Header, plan: _Plan, columns: Sequence[Column]) -> pa.Table:
    if header.codec not in NATIVE_CODECS:
        raise _Fallback(f"codec {header.codec!r} is not decoded by polars")
    expected, empty_blocks = _walk_blocks(data, header)
    if expected == 0:
        # A container without records (a header alone, or only empty blocks) is legal Avro,
        # but polars 1.44 fails on it with deflate (OutOfSpec) and panics with snappy.
        return arrow_schema(columns).empty_table()
    plain = data
    if empty_blocks:
        # polars 1.44 takes a block of 0 records for the end of the file and silently drops
        # every block after it; such blocks are legal Avro and carry nothing, so cut them out.
        plain = _without_spans(data, empty_blocks)
    if plan.stripped_schema is not None:
        plain = _without_logical_types(plain, header, plan.stripped_schema)
    try:
        # Newest compat level: strings leave polars as string_view without a copy (the default,
        # large_string, costs a conversion per value); one cast to string follows in _convert.
        raw = pl.read_avro(io.BytesIO(plain)).to_arrow(compat_level=pl.CompatLevel.newest())
    except _POLARS_ERRORS as exc:
        raise _Fallback(f"polars failed: {type(exc).__name__}: {str(exc)[:200]}") from exc
    if raw.num_rows != expected:  # the blocks' own counts are the cross-check of a silent stop
        raise _Fallback(f"polars read {raw.num_rows} records, the blocks hold {expected}")
    logical = plan.logical
    present = set(raw.column_names)
    arrays = []
    for column in columns:
        if column.name in present:
            arrays.append(
                _convert(raw.column(column.name), column, logical.get(column.name))
            )
        else:  # schema evolution: a DDL column this writer did not have
            arrays.append(pa.nulls(raw.num_rows, arrow_type(column)))
    arrays.append(_convert_sys_op(raw.column(SYS_OP)))
    return pa.Table.from_arrays(arrays, schema=arrow_schema(columns))


def _walk_blocks(data: bytes, header: _Header) -> tuple[int, list[tuple[int, int]]]:
    """(records in all blocks, [(start, end) of each block of 0 records]), reading only the
    block headers and sync markers. Anything malformed (truncated, wrong sync, negative count)
    goes to fastavro, whose error is the reference one."""
    pos, total, empty, size_of = header.end, 0, [], len(data)
    try:
        while pos < size_of:
            count, after_count = _read_long(data, pos)
            size, after_size = _read_long(data, after_count)
            end = after_size + size + 16
            if count < 0 or size < 0 or end > size_of or data[end - 16:end] != header.sync:
                raise ValueError("malformed block")
            # polars reserves room for the records a block claims (10^12: 8 TB, and an abort);
            # a row takes one byte at least (sys_op), so its bytes bound them.
            if not block_holds(header.codec, memoryview(data)[after_size:after_size + size], count):
                raise _Fallback(f"block at byte {pos} claims {count} records in {size} bytes")
            if count == 0:
                empty.append((pos, end))
            total += count
            pos = end
    except (ValueError, IndexError) as exc:
        raise _Fallback(f"block at byte {pos} is truncated or malformed") from exc
    return total, empty


def _without_spans(data: bytes, spans: list[tuple[int, int]]) -> bytes:
    view, parts, pos = memoryview(data), [], 0
    for start, end in spans:
        parts.append(view[pos:start])
        pos = end
    parts.append(view[pos:])
    return b"".join(parts)


def _convert(raw: pa.ChunkedArray, column: Column, logical: str | None) -> pa.ChunkedArray:
    """Raw Avro primitives (as polars decoded them) -> the column's Arrow type, exactly as
    `python_value` would convert each value. Anything doubtful raises _Fallback."""
    base, target = column.type, arrow_type(column)
    kind = raw.type
    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        raw, kind = raw.cast(pa.string()), pa.string()
    if base in ("bigint", "int"):
        if kind == target:
            return raw
        if kind == pa.int32():
            return raw.cast(target)
    elif base == "boolean":
        if kind == pa.bool_():
            return raw
    elif base == "float":
        if kind == pa.float32():
            return raw
        if kind == pa.float64():
            out = raw.cast(pa.float32(), safe=False)  # round to nearest, as struct.pack("<f")
            # A finite double too big for a float32 becomes inf: python_value refuses it.
            if pc.any(pc.and_(pc.is_inf(out), pc.invert(pc.is_inf(raw)))).as_py():
                raise _Fallback(f"column {column.name!r}: a double overflows float32")
            return out
    elif base == "double":
        if kind == target:
            return raw
        if kind == pa.float32():
            return raw.cast(target)
    elif base in ("char", "varchar", "link"):
        if kind == pa.string():
            return raw
    elif base == "uuid":
        if kind == pa.string():
            if pc.all(pc.string_is_ascii(raw)).as_py() is False:
                # python_value lowercases with str.lower, whose Unicode rules are not Arrow's.
                raise _Fallback(f"column {column.name!r}: a uuid has non-ASCII characters")
            out = pc.ascii_lower(raw)
            if logical == "uuid" and pc.all(
                pc.match_substring_regex(out, _CANONICAL_UUID)
            ).as_py() is False:
                # fastavro parses logical uuids with uuid.UUID: non-canonical spellings are
                # rewritten ("{...}", no hyphens) or refused; let it decide.
                raise _Fallback(f"column {column.name!r}: a uuid is not in canonical form")
            return out
    elif base in ("date", "time", "timestamp", "int32"):
        if kind in (pa.int32(), pa.int64()):
            _check_range(raw, column)
            if base == "date":
                return raw.cast(pa.int32()).cast(target)
            return raw.cast(target)
    # After check_writer_schema this is unreachable unless polars decodes a primitive to an
    # unexpected Arrow type (a future version): the reference decoder is always right.
    raise _Fallback(f"column {column.name!r}: polars gave {kind} for DDL type {base}")


def _check_range(raw: pa.ChunkedArray, column: Column) -> None:
    low, high = _RAW_RANGE[column.type]
    if raw.null_count == len(raw):
        return
    bounds = pc.min_max(raw)
    smallest, largest = bounds["min"].as_py(), bounds["max"].as_py()
    if smallest < low or largest > high:
        bad = smallest if smallest < low else largest
        raise _Fallback(f"column {column.name!r}: {bad} is outside {low}..{high}")


def _convert_sys_op(raw: pa.ChunkedArray) -> pa.ChunkedArray:
    if raw.type == pa.int32():
        return raw
    if raw.type == pa.int64():
        if raw.null_count < len(raw):
            bounds = pc.min_max(raw)
            if bounds["min"].as_py() < _INT32[0] or bounds["max"].as_py() > _INT32[1]:
                raise _Fallback("sys_op holds a value outside int32")
        return raw.cast(pa.int32())
    raise _Fallback(f"sys_op: polars gave {raw.type}")


# ---------------------------------------------------------------- reference (fastavro) path


def _via_fastavro(data: bytes, columns: Sequence[Column]) -> pa.Table:
    """The reference answer: `iter_rows` (canonical Python values) into Arrow, record by record.
    Raises what iter_rows raises (BadContainerFileError, SchemaMismatchError, ...)."""
    rows = list(iter_rows(data, columns))
    schema = arrow_schema(columns)
    arrays = []
    for field in schema:
        values = [row.get(field.name) for row in rows]
        try:
            arrays.append(pa.array(values, type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            # only sys_op is not normalized by iter_rows: a long too big for int32
            raise SchemaMismatchError(f"column {field.name!r}: {exc}") from exc
    return pa.Table.from_arrays(arrays, schema=schema)

