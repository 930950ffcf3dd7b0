"""Column values of a Debezium row image, typed by the Kafka Connect schema the JSON converter
writes beside them (`schema`/`payload` form), or taken as JSON gives them (schemaless form).

What flows through: one column's JSON value and its Connect field schema (or none) -> a Python
value as resources/codecs/cdc.py wants it, and the column's type name for the lake's type map.
Connect types: int8..int64, float32/64, boolean, string, bytes (Base64 in JSON). Logical types
by schema `name`: org.apache.kafka.connect.data.Decimal (Base64 two's-complement unscaled bytes,
`parameters.scale`), io.debezium.time.Date / org.apache.kafka.connect.data.Date (days since
epoch), io.debezium.time.Timestamp / MicroTimestamp / NanoTimestamp and
org.apache.kafka.connect.data.Timestamp (epoch milli/micro/nanoseconds, naive UTC),
io.debezium.time.ZonedTimestamp (ISO-8601 text, to naive UTC). Any other name is read by its
Connect type. Every number is bounded (resources/codecs/limits.py): integers 64-bit, times within
the years 1..9999, a decimal at most 38 digits; a struct, array or map in a column is refused
(a column holds one value). Errors are `ValueError` with a reason; the codec wraps them.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from decimal import Decimal
from typing import Any

from resources.codecs.limits import LONG_MAX, LONG_MIN, MAX_TIMESTAMP_US, MIN_TIMESTAMP_US

DECIMAL = "org.apache.kafka.connect.data.Decimal"
_DAYS = {"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"}
_EPOCH_UNITS = {"io.debezium.time.Timestamp": 1000, "org.apache.kafka.connect.data.Timestamp": 1000,
                "io.debezium.time.MicroTimestamp": 1, "io.debezium.time.NanoTimestamp": None}
ZONED = "io.debezium.time.ZonedTimestamp"
_INTS = {"int8", "int16", "int32", "int64"}
_EPOCH = dt.datetime(1970, 1, 1)
_MAX_DECIMAL_BYTES = 17  # 38 decimal digits need 16 bytes; one more for the sign
_MIN_DAY, _MAX_DAY = MIN_TIMESTAMP_US // 86_400_000_000, MAX_TIMESTAMP_US // 86_400_000_000


def type_name(field: dict) -> str:
    """The name the lake's type map knows a column by: its logical name, else its Connect type;
    a decimal with a known precision as decimal(p,s)."""
    name = field.get("name")
    if name == DECIMAL:
        params = field.get("parameters") or {}
        precision = params.get("connect.decimal.precision")
        if precision is not None:
            return f"decimal({precision},{params.get('scale', 0)})"
    return str(name or field.get("type"))


def _long(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} is {type(value).__name__}, expected an integer")
    if not LONG_MIN <= value <= LONG_MAX:
        raise ValueError(f"{what} is an integer beyond 64 bits")
    return value


def _micros(us: int, what: str) -> dt.datetime:
    if not MIN_TIMESTAMP_US <= us <= MAX_TIMESTAMP_US:
        raise ValueError(f"{what} is outside the years 1..9999")
    return _EPOCH + dt.timedelta(microseconds=us)


def _decimal(value: Any, field: dict, what: str) -> Decimal:
    if not isinstance(value, str):
        raise ValueError(f"{what} is {type(value).__name__}, expected Base64 text of a decimal")
    if len(value) > 4 * ((_MAX_DECIMAL_BYTES + 2) // 3):
        raise ValueError(f"{what} holds more than {_MAX_DECIMAL_BYTES} bytes: beyond 38 digits")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not Base64") from None
    if len(raw) > _MAX_DECIMAL_BYTES:
        raise ValueError(f"{what} holds {len(raw)} bytes: beyond 38 digits")
    scale = (field.get("parameters") or {}).get("scale", 0)
    try:
        scale = int(scale)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: decimal scale {scale!r} is not an integer") from None
    if not 0 <= scale <= 38:
        raise ValueError(f"{what}: decimal scale {scale} is outside 0..38")
    return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)


def typed(value: Any, field: dict | None, what: str) -> Any:
    """One column's value, converted by its Connect field schema (None: schemaless, as JSON gives it)."""
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        raise ValueError(f"{what} is {'an object' if isinstance(value, dict) else 'an array'}, expected one value")
    if field is None:
        return _long(value, what) if isinstance(value, int) and not isinstance(value, bool) else value
    name, kind = field.get("name"), field.get("type")
    if name == DECIMAL:
        return _decimal(value, field, what)
    if name in _DAYS:
        days = _long(value, what)
        if not _MIN_DAY <= days <= _MAX_DAY:
            raise ValueError(f"{what} is outside the years 1..9999")
        return (_EPOCH + dt.timedelta(days=days)).date()
    if name in _EPOCH_UNITS:
        n = _long(value, what)
        per = _EPOCH_UNITS[name]
        return _micros(n // 1000 if per is None else n * per, what)
    if name == ZONED:
        try:
            moment = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{what} {str(value)[:40]!r} is not ISO-8601") from None
        return moment.astimezone(dt.timezone.utc).replace(tzinfo=None) if moment.tzinfo else moment
    if kind in _INTS:
        return _long(value, what)
    if kind in ("float32", "float64"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{what} is {type(value).__name__}, expected a number")
        return float(value)
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"{what} is {type(value).__name__}, expected a boolean")
        return value
    if kind == "bytes":
        try:
            return base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{what} is not Base64") from None
    if kind == "string":
        if not isinstance(value, str):
            raise ValueError(f"{what} is {type(value).__name__}, expected a string")
        return value
    raise ValueError(f"{what} has Connect type {kind!r}, which a lake column cannot hold")
