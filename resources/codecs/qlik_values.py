"""Qlik Replicate's column values and row positions, pure: the `columnMask` bit set, the order
key of a change (`changeSequence`, then `transactionEventCounter`, then the row), a row's
identity, and the coercion of each Qlik data type to its Python value within the bounds of
`resources/codecs/limits.py`. `resources/codecs/qlik.py` (its docstring says the format)
decodes messages with them; the emulator writes with the same functions, so both sides agree
by construction.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal
from typing import Any, Mapping

from resources.codecs.limits import LONG_MIN
from resources.errors import DecodeError


class QlikBadMaskError(DecodeError):
    """changeMask/columnMask is not hex bytes, or sets a bit past the table's last column."""

    kind = "qlik_bad_mask"


class QlikBadValueError(DecodeError):
    """A column value (or a header such as timestamp) does not fit its declared type."""

    kind = "qlik_bad_value"


# ---------------------------------------------------------------------------------------------
# Masks and order keys (also used by the emulator, so both sides agree by construction)
# ---------------------------------------------------------------------------------------------


def decode_mask(mask: str | bytes | None, column_count: int) -> frozenset[int] | None:
    """The column ordinals (1-based) whose bits are set; None when no mask is given.

    Least significant byte first: "0B" -> {1, 2, 4}; "0001" -> {9}; "FF03" -> ordinals 1..10."""
    if mask is None:
        return None
    if isinstance(mask, (bytes, bytearray)):
        raw = bytes(mask)
    elif isinstance(mask, str):
        text = mask.strip()
        if not text:
            return None
        if len(text) % 2:
            raise QlikBadMaskError(f"mask {mask!r} has an odd number of hex digits (expected whole bytes)")
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raise QlikBadMaskError(f"mask {mask!r} is not hexadecimal") from None
    else:
        raise QlikBadMaskError(f"mask must be a hex string, got {type(mask).__name__}")
    ordinals = set()
    for i, byte in enumerate(raw):
        for b in range(8):
            if byte >> b & 1:
                bit = i * 8 + b
                if bit >= column_count:
                    raise QlikBadMaskError(
                        f"mask {mask!r} sets bit {bit}, but the table has {column_count} columns"
                        f" (bits 0..{column_count - 1})"
                    )
                ordinals.add(bit + 1)
    return frozenset(ordinals)


def encode_mask(ordinals, column_count: int) -> str:
    """Inverse of `decode_mask`: uppercase hex, least significant byte first, whole bytes."""
    value = 0
    for o in ordinals:
        if not 1 <= o <= column_count:
            raise ValueError(f"ordinal {o} outside 1..{column_count}")
        value |= 1 << (o - 1)
    return value.to_bytes(max(1, (column_count + 7) // 8), "little").hex().upper()


_DIGITS = re.compile(r"[0-9]+")


def order_key(change_sequence: str | None, event_counter: int | None = None, row_id: str = "") -> tuple:
    """The total order of a Qlik change: (sequence as int | -1 text | -2 missing, text, counter, row id)."""
    seq = (change_sequence or "").strip()
    counter = event_counter or 0
    if not seq:
        return (-2, "", counter, row_id)
    if _DIGITS.fullmatch(seq):
        return (int(seq), "", counter, "")
    return (-1, seq, counter, "")


def row_identity(schema: str | None, table: str, key_values: Mapping[str, Any]) -> str:
    """"schema.table:<key as JSON>": tells full-load rows apart when they carry no changeSequence."""
    return f"{schema or ''}.{table}:" + json.dumps(key_values, sort_keys=True, default=str, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# Column types and values
# ---------------------------------------------------------------------------------------------

_INT_TYPES = {"INT1", "INT2", "INT4", "INT8", "UINT1", "UINT2", "UINT4", "UINT8"}
_INT_LOW, _INT_HIGH = LONG_MIN, 2**64 - 1  # INT8's lowest, UINT8's highest
_FLOAT_TYPES = {"REAL4", "REAL8"}
_TEXT_TYPES = {"STRING", "WSTRING", "CLOB", "NCLOB"}
_BINARY_TYPES = {"BYTES", "BLOB"}
_LENGTH_TYPES = {"STRING", "WSTRING", "BYTES"}

_DATETIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?)?\s*(Z|[+-]\d{2}:?\d{2})?"
)
_TIME_RE = re.compile(r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


def base_type(type_name: str) -> str:
    """"NUMERIC(12,2)" -> "NUMERIC"."""
    return type_name.split("(", 1)[0].strip().upper()


def parse_datetime(text: str) -> dt.datetime:
    """"YYYY-MM-DD[(T| )hh:mm:ss[.f]][Z|±hh:mm]" -> naive UTC datetime (no zone means UTC)."""
    m = _DATETIME_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a date-time")
    y, mo, d, h, mi, s, frac, zone = m.groups()
    value = dt.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), int(((frac or "") + "000000")[:6]))
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        value -= sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return value


def to_micros(value: dt.datetime) -> int:
    return (value - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


def coerce(type_name: str, value: Any) -> Any:
    """The canonical Python value of `value` for a column of Qlik type `type_name` (None stays None).

    Raises ValueError/TypeError when the value does not fit (the caller wraps it)."""
    if value is None:
        return None
    base = base_type(type_name)
    if base in _INT_TYPES:
        if isinstance(value, bool):
            raise TypeError("a boolean is not an integer")
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            value = int(value)  # over 4300 digits: ValueError, a bad value like any other
        if isinstance(value, (int, float, Decimal)) and not _INT_LOW <= value <= _INT_HIGH:
            raise ValueError(f"{str(value)[:40]} is outside {_INT_LOW}..{_INT_HIGH}")  # inf and nan too
        if isinstance(value, int):
            return value
        if isinstance(value, (float, Decimal)) and value == int(value):
            return int(value)
        raise ValueError(f"{value!r} is not an integer")
    if base in _FLOAT_TYPES:
        if isinstance(value, bool):
            raise TypeError("a boolean is not a number")
        if isinstance(value, (int, float, Decimal, str)):
            return float(value)
        raise TypeError(f"{type(value).__name__} is not a number")
    if base == "NUMERIC":
        if isinstance(value, bool):
            raise TypeError("a boolean is not a number")
        if isinstance(value, Decimal):
            return value
        if isinstance(value, (int, str)):
            return Decimal(value.strip() if isinstance(value, str) else value)
        if isinstance(value, float):
            return Decimal(repr(value))
        raise TypeError(f"{type(value).__name__} is not a number")
    if base == "BOOLEAN":
        if isinstance(value, bool):
            return value
        if value in (0, 1) and not isinstance(value, float):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
            return value.strip().lower() in ("true", "1")
        raise ValueError(f"{value!r} is not a boolean")
    if base == "DATETIME":
        if isinstance(value, dt.datetime):
            return value.astimezone(dt.timezone.utc).replace(tzinfo=None) if value.tzinfo else value
        if isinstance(value, str):
            return parse_datetime(value)
        raise TypeError(f"{type(value).__name__} is not a date-time")
    if base == "DATE":
        if isinstance(value, dt.datetime):
            raise TypeError("a date-time is not a date")
        if isinstance(value, dt.date):
            return value
        if isinstance(value, str):
            return dt.date.fromisoformat(value.strip())
        raise TypeError(f"{type(value).__name__} is not a date")
    if base == "TIME":
        if isinstance(value, dt.time):
            return value
        if isinstance(value, str):
            m = _TIME_RE.fullmatch(value.strip())
            if m is None:
                raise ValueError(f"{value!r} is not a time of day")
            h, mi, s, frac = m.groups()
            return dt.time(int(h), int(mi), int(s), int(((frac or "") + "000000")[:6]))
        raise TypeError(f"{type(value).__name__} is not a time of day")
    if base in _TEXT_TYPES:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
            return str(value)
        raise TypeError(f"{type(value).__name__} is not text")
    if base in _BINARY_TYPES:
        if isinstance(value, (bytes, str)):
            return value
        raise TypeError(f"{type(value).__name__} is not binary")
    return value  # a type this codec does not know: passed through, never an error
