"""Prostore logical column types and the values that flow through them.

A column's type comes from the changelog DDL (`CREATE TABLE ... (id bigint, ...)`). This module
maps each Prostore type to the Avro type Prostore writes in a backup, the Arrow type and the Spark
SQL type the lake uses, and defines the one *canonical Python value* of each type that every
reader, writer, emulator and test compares:

| Prostore       | Avro written by Prostore        | Arrow         | Spark            | Python      |
|----------------|---------------------------------|---------------|------------------|-------------|
| bigint, int    | long (INT is 64-bit)            | int64         | LongType         | int         |
| int32          | int                             | int32         | IntegerType      | int         |
| boolean        | boolean                         | bool          | BooleanType      | bool        |
| float          | float                           | float32       | FloatType        | float (f32) |
| double         | double                          | float64       | DoubleType       | float       |
| char, varchar, link | string                     | string        | StringType       | str         |
| uuid           | string (logical uuid)           | string        | StringType       | str, lower  |
| date           | int (logical date)              | date32        | DateType         | date        |
| time           | long (logical time-micros)      | time64[us]    | LongType (µs)    | time        |
| timestamp      | long (logical timestamp-micros) | timestamp[us] | TimestampNTZType | datetime    |

(a datetime here is naive and means UTC.)

Guarantees: `python_value` accepts whatever a decoder hands over for a column (with or without
Avro logical types, so a TIMESTAMP written as a plain long and one written as timestamp-micros
give the same datetime) and `avro_raw_value` is its inverse onto plain Avro primitives, so
`python_value(c, avro_raw_value(c, v)) == v` for every canonical `v`. A value that does not fit
its column raises `BadValueError`; an unknown type name raises `UnknownTypeError`.
Nothing here imports Dagster, Kafka or (at import time) Spark.
"""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from resources.errors import DeltaportError

# Every type name the seed's DDL uses, lowercase. INT is 64-bit in Prostore; INT32 is 32-bit.
PROSTORE_TYPES = frozenset(
    {"bigint", "boolean", "int32", "int", "float", "double", "char", "varchar",
     "uuid", "link", "date", "time", "timestamp"}
)
STRING_TYPES = frozenset({"char", "varchar", "link"})

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_MICROS_PER_DAY = 86_400_000_000
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class UnknownTypeError(DeltaportError, ValueError):
    """A DDL names a column type that Prostore (as far as this platform knows) does not have."""

    def __init__(self, type_name: str):
        self.type_name = type_name
        super().__init__(
            f"unknown Prostore column type {type_name!r} "
            f"(known: {', '.join(sorted(PROSTORE_TYPES))})"
        )


class BadValueError(DeltaportError, ValueError):
    """A value does not fit its column's type (wrong Python type, out of range)."""


@dataclass(frozen=True)
class Column:
    """One column of a Prostore logical table, as its DDL declares it.

    `type` is the lowercase base name ("char", not "CHAR(10)"); `length` is the `(n)` of
    char/varchar (or the precision of time/timestamp when the DDL gives one), else None.
    """

    name: str
    type: str
    length: int | None = None
    nullable: bool = True

    def __post_init__(self) -> None:
        # Normalized here once, so `Column("x", "BIGINT")` and the parser's output compare equal.
        base = self.type.strip().lower()
        if base not in PROSTORE_TYPES:
            raise UnknownTypeError(self.type)
        object.__setattr__(self, "type", base)


def _base(column: Column | str) -> str:
    if isinstance(column, Column):
        return column.type
    base = column.strip().lower()
    if base not in PROSTORE_TYPES:
        raise UnknownTypeError(column)
    return base


def avro_type(column: Column | str, *, logical_types: bool = True) -> str | dict:
    """The Avro type Prostore writes for this column (without the `["null", ...]` union).

    With `logical_types=False`, the bare primitive (what the seed's own example does for
    TIMESTAMP: a plain long of microseconds)."""
    base = _base(column)
    primitive, logical = _AVRO[base]
    if logical is None or not logical_types:
        return primitive
    return {"type": primitive, "logicalType": logical}


_AVRO: dict[str, tuple[str, str | None]] = {
    "bigint": ("long", None),
    "int": ("long", None),
    "int32": ("int", None),
    "boolean": ("boolean", None),
    "float": ("float", None),
    "double": ("double", None),
    "char": ("string", None),
    "varchar": ("string", None),
    "link": ("string", None),
    "uuid": ("string", "uuid"),
    "date": ("int", "date"),
    "time": ("long", "time-micros"),
    "timestamp": ("long", "timestamp-micros"),
}


def arrow_type(column: Column | str) -> pa.DataType:
    """The Arrow type of this column in decoded batches (timestamps naive: they mean UTC)."""
    base = _base(column)
    if base in ("bigint", "int"):
        return pa.int64()
    if base == "int32":
        return pa.int32()
    if base == "boolean":
        return pa.bool_()
    if base == "float":
        return pa.float32()
    if base == "double":
        return pa.float64()
    if base == "date":
        return pa.date32()
    if base == "time":
        return pa.time64("us")
    if base == "timestamp":
        return pa.timestamp("us")
    return pa.string()  # char, varchar, link, uuid


def spark_type(column: Column | str) -> Any:
    """The Spark SQL type (`pyspark.sql.types`) of this column in the lake."""
    # Imported here: codecs are used by processes that never start Spark.
    from pyspark.sql import types as T

    base = _base(column)
    if base in ("bigint", "int"):
        return T.LongType()
    if base == "int32":
        return T.IntegerType()
    if base == "boolean":
        return T.BooleanType()
    if base == "float":
        return T.FloatType()
    if base == "double":
        return T.DoubleType()
    if base == "date":
        return T.DateType()
    if base == "timestamp":
        return T.TimestampNTZType()  # Prostore timestamps carry no zone; Iceberg `timestamp`
    if base == "time":
        # pyspark 4.1 has TimeType, but Iceberg 1.11's Spark runtime still rejects Iceberg `time`
        # ("Spark does not support time fields", TypeToSparkType; apache/iceberg#16663 is open),
        # so TIME lands as microseconds since midnight: exact, and what Avro time-micros holds.
        return T.LongType()
    return T.StringType()  # char, varchar, link, uuid


def spark_value(column: Column | str, value: Any) -> Any:
    """A canonical value as a Spark row wants it (only TIME differs: µs since midnight)."""
    if value is not None and _base(column) == "time":
        return time_to_micros(value)
    return value


def time_to_micros(value: dt.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def micros_to_time(micros: int) -> dt.time:
    if not 0 <= micros < _MICROS_PER_DAY:
        raise BadValueError(f"time of day {micros} µs is outside 0..{_MICROS_PER_DAY - 1}")
    seconds, micro = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return dt.time(hour, minute, second, micro)


def timestamp_to_micros(value: dt.datetime) -> int:
    """Microseconds since the epoch; a naive datetime means UTC, an aware one is converted."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def micros_to_timestamp(micros: int) -> dt.datetime:
    try:
        return _EPOCH + dt.timedelta(microseconds=micros)
    except OverflowError as exc:
        raise BadValueError(f"timestamp {micros} µs since the epoch is out of range") from exc


def to_float32(value: float) -> float:
    """`value` rounded to the nearest float32, as a Python float (what a float column holds)."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError as exc:
        raise BadValueError(f"{value!r} does not fit a float (float32)") from exc


def python_value(column: Column | str, raw: Any) -> Any:
    """Normalize a decoded value (raw Avro primitive or fastavro's logical-type object) to the
    canonical Python value of the column's type. None stays None."""
    if raw is None:
        return None
    base = _base(column)
    if base in ("bigint", "int", "int32"):
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise BadValueError(f"{base} value must be an int, got {type(raw).__name__} {raw!r}")
        low, high = (_INT32_MIN, _INT32_MAX) if base == "int32" else (_INT64_MIN, _INT64_MAX)
        if not low <= raw <= high:
            raise BadValueError(f"{raw} is out of range for {base}")
        return int(raw)
    if base == "boolean":
        if not isinstance(raw, bool):
            raise BadValueError(f"boolean value must be a bool, got {type(raw).__name__} {raw!r}")
        return raw
    if base in ("float", "double"):
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise BadValueError(f"{base} value must be a number, got {type(raw).__name__} {raw!r}")
        return to_float32(float(raw)) if base == "float" else float(raw)
    if base in STRING_TYPES:
        if not isinstance(raw, str):
            raise BadValueError(f"{base} value must be a str, got {type(raw).__name__} {raw!r}")
        return raw
    if base == "uuid":
        # fastavro decodes logicalType uuid to uuid.UUID; a plain string is kept as written,
        # lowercased so both spellings compare equal.
        if isinstance(raw, uuid.UUID):
            return str(raw)
        if not isinstance(raw, str):
            raise BadValueError(f"uuid value must be a str, got {type(raw).__name__} {raw!r}")
        return raw.lower()
    if base == "date":
        if isinstance(raw, dt.datetime):  # a datetime is a date subclass: refuse, don't truncate
            raise BadValueError(f"date value must be a date or days, got datetime {raw!r}")
        if isinstance(raw, dt.date):
            return raw
        if isinstance(raw, int) and not isinstance(raw, bool):
            try:
                return _EPOCH_DATE + dt.timedelta(days=raw)
            except OverflowError as exc:
                raise BadValueError(f"date {raw} days since the epoch is out of range") from exc
        raise BadValueError(f"date value must be a date or int days, got {type(raw).__name__}")
    if base == "time":
        if isinstance(raw, dt.time):
            return raw.replace(tzinfo=None)
        if isinstance(raw, int) and not isinstance(raw, bool):
            return micros_to_time(raw)
        raise BadValueError(f"time value must be a time or int µs, got {type(raw).__name__}")
    # timestamp
    if isinstance(raw, dt.datetime):
        if raw.tzinfo is not None:
            return raw.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return raw
    if isinstance(raw, int) and not isinstance(raw, bool):
        return micros_to_timestamp(raw)
    raise BadValueError(f"timestamp value must be a datetime or int µs, got {type(raw).__name__}")


def avro_raw_value(column: Column | str, value: Any) -> Any:
    """The plain Avro primitive for a canonical value (no logical-type objects): days for a
    date, microseconds for a time or timestamp, str for a uuid. Valid for a schema with or
    without logical-type annotations, since those annotate exactly these primitives."""
    value = python_value(column, value)  # validates, and accepts int/aware forms too
    if value is None:
        return None
    base = _base(column)
    if base == "date":
        return (value - _EPOCH_DATE).days
    if base == "time":
        return time_to_micros(value)
    if base == "timestamp":
        return timestamp_to_micros(value)
    return value
