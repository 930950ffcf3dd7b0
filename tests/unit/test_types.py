"""Prostore column types: Avro/Arrow/Spark mappings and canonical Python values."""

from __future__ import annotations

import datetime as dt
import struct
import uuid

import pyarrow as pa
import pytest

from resources.codecs.types import (
    PROSTORE_TYPES,
    BadValueError,
    Column,
    UnknownTypeError,
    arrow_type,
    avro_raw_value,
    avro_type,
    python_value,
    spark_type,
    spark_value,
    to_float32,
)
from resources.errors import DeltaportError

# (type, Avro with logical types, Avro without, Arrow)
MAPPINGS = [
    ("bigint", "long", "long", pa.int64()),
    ("int", "long", "long", pa.int64()),
    ("int32", "int", "int", pa.int32()),
    ("boolean", "boolean", "boolean", pa.bool_()),
    ("float", "float", "float", pa.float32()),
    ("double", "double", "double", pa.float64()),
    ("char", "string", "string", pa.string()),
    ("varchar", "string", "string", pa.string()),
    ("link", "string", "string", pa.string()),
    ("uuid", {"type": "string", "logicalType": "uuid"}, "string", pa.string()),
    ("date", {"type": "int", "logicalType": "date"}, "int", pa.date32()),
    ("time", {"type": "long", "logicalType": "time-micros"}, "long", pa.time64("us")),
    ("timestamp", {"type": "long", "logicalType": "timestamp-micros"}, "long", pa.timestamp("us")),
]

# The seed's INSERT into sourcedb.table1_adqm, as canonical values and as raw Avro primitives.
SEED_ROW = [
    ("bigint", 1, 1),
    ("boolean", False, False),
    ("int32", 32768, 32768),
    ("int", 65537, 65537),
    ("bigint", 1280000, 1280000),
    ("float", 3.141525983810425, 3.141525983810425),
    ("double", 2.718281828, 2.718281828),
    ("char", "char_value", "char_value"),
    ("varchar", "varchar_value", "varchar_value"),
    ("uuid", "12345678-1234-abcd-ef00-1234567899ab", "12345678-1234-abcd-ef00-1234567899ab"),
    ("link", "https://www.google.com", "https://www.google.com"),
    ("date", dt.date(1970, 1, 11), 10),
    ("time", dt.time(13, 10, 30), 47_430_000_000),
    ("timestamp", dt.datetime(1970, 1, 1, 13, 10, 30), 47_430_000_000),
]


def test_every_seed_type_is_known():
    assert {m[0] for m in MAPPINGS} == PROSTORE_TYPES


@pytest.mark.parametrize("type_name, with_logical, without_logical, arrow", MAPPINGS)
def test_avro_and_arrow_mapping(type_name, with_logical, without_logical, arrow):
    assert avro_type(type_name) == with_logical
    assert avro_type(Column("c", type_name), logical_types=False) == without_logical
    assert arrow_type(type_name) == arrow


def test_arrow_timestamp_has_no_zone():
    assert arrow_type("timestamp").tz is None


def test_spark_mapping():
    from pyspark.sql import types as T

    expected = {
        "bigint": T.LongType(), "int": T.LongType(), "int32": T.IntegerType(),
        "boolean": T.BooleanType(), "float": T.FloatType(), "double": T.DoubleType(),
        "char": T.StringType(), "varchar": T.StringType(), "link": T.StringType(),
        "uuid": T.StringType(), "date": T.DateType(), "timestamp": T.TimestampNTZType(),
        # Iceberg 1.11's Spark runtime cannot write Spark TimeType: microseconds since midnight.
        "time": T.LongType(),
    }
    assert {t: spark_type(t) for t in PROSTORE_TYPES} == expected
    assert spark_value("time", dt.time(13, 10, 30)) == 47_430_000_000
    assert spark_value("time", None) is None
    assert spark_value("date", dt.date(1970, 1, 11)) == dt.date(1970, 1, 11)


def test_column_normalizes_type_name():
    assert Column("c", "VARCHAR", 256) == Column("c", "varchar", 256)
    assert Column("c", " Timestamp ").type == "timestamp"


def test_unknown_type():
    with pytest.raises(UnknownTypeError) as info:
        Column("c", "money")
    assert isinstance(info.value, DeltaportError)
    assert info.value.type_name == "money"
    assert str(info.value).startswith("unknown Prostore column type 'money' (known: bigint, boolean,")
    with pytest.raises(UnknownTypeError):
        avro_type("text")


@pytest.mark.parametrize("type_name, canonical, raw", SEED_ROW)
def test_seed_row_values_round_trip(type_name, canonical, raw):
    assert python_value(type_name, raw) == canonical
    assert avro_raw_value(type_name, canonical) == raw
    assert python_value(type_name, avro_raw_value(type_name, canonical)) == canonical
    assert python_value(type_name, None) is None
    assert avro_raw_value(type_name, None) is None


def test_float_is_rounded_to_float32():
    assert python_value("float", 3.141526) == struct.unpack("<f", struct.pack("<f", 3.141526))[0]
    assert python_value("float", 3.141526) != 3.141526
    assert python_value("float", 2) == 2.0 and isinstance(python_value("float", 2), float)
    assert python_value("double", 3.141526) == 3.141526
    assert to_float32(to_float32(0.1)) == to_float32(0.1)
    with pytest.raises(BadValueError, match="does not fit a float"):
        python_value("float", 1e300)


def test_uuid_lowercase_from_string_or_uuid():
    u = "12345678-1234-ABCD-EF00-1234567899AB"
    assert python_value("uuid", u) == u.lower()
    assert python_value("uuid", uuid.UUID(u)) == u.lower()


def test_logical_type_objects_and_raw_primitives_agree():
    aware = dt.datetime(1970, 1, 1, 13, 10, 30, tzinfo=dt.timezone.utc)
    assert python_value("timestamp", aware) == dt.datetime(1970, 1, 1, 13, 10, 30)
    plus3 = dt.datetime(1970, 1, 1, 16, 10, 30, tzinfo=dt.timezone(dt.timedelta(hours=3)))
    assert python_value("timestamp", plus3) == dt.datetime(1970, 1, 1, 13, 10, 30)
    assert python_value("timestamp", 1614269474000000) == dt.datetime(2021, 2, 25, 16, 11, 14)
    assert python_value("timestamp", -1) == dt.datetime(1969, 12, 31, 23, 59, 59, 999999)
    assert avro_raw_value("timestamp", plus3) == 47_430_000_000
    assert python_value("date", -1) == dt.date(1969, 12, 31)
    assert python_value("time", 0) == dt.time(0)
    assert python_value("time", 86_399_999_999) == dt.time(23, 59, 59, 999999)
    assert avro_raw_value("time", dt.time(23, 59, 59, 999999)) == 86_399_999_999


@pytest.mark.parametrize(
    "type_name, raw, message",
    [
        ("bigint", "1", "bigint value must be an int, got str '1'"),
        ("int", True, "int value must be an int, got bool True"),
        ("int32", 2**31, "2147483648 is out of range for int32"),
        ("bigint", 2**63, "9223372036854775808 is out of range for bigint"),
        ("boolean", 1, "boolean value must be a bool, got int 1"),
        ("varchar", 5, "varchar value must be a str, got int 5"),
        ("double", "x", "double value must be a number, got str 'x'"),
        ("date", dt.datetime(2020, 1, 1), "date value must be a date or days, got datetime"),
        ("time", 86_400_000_000, "time of day 86400000000 µs is outside 0..86399999999"),
        ("time", -1, "time of day -1 µs is outside 0..86399999999"),
        ("timestamp", "2020-01-01", "timestamp value must be a datetime or int µs, got str"),
    ],
)
def test_bad_values(type_name, raw, message):
    with pytest.raises(BadValueError) as info:
        python_value(type_name, raw)
    assert str(info.value).startswith(message)
    assert isinstance(info.value, DeltaportError)
