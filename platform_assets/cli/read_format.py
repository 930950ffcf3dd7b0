"""How `deltaport read` prints a lake value: one JSON object per line (jsonl), or CSV fields.

In: rows of the canonical Python values a lake read gives (`resources.lake.read`, `resources.lake.cdc`):
int, float, bool, str, Decimal, bytes (or bytearray), date, time, naive UTC datetime, None. Out: text.

What it guarantees, in both formats alike:
- Decimals keep their exact digits and scale: in jsonl a JSON *number* written with the column's
  digits (12.50, 1234567890123456789012345678.0123456789, never an exponent), in CSV the same text.
  JSON numbers have no precision limit; a reader that wants them exact parses them as decimals
  (Python `json.loads(line, parse_float=Decimal)`, jq 1.7, Jackson's BigDecimal), one that does not
  gets the nearest double, as for any JSON number. Text instead would make every reader convert a
  column the README promises as numbers.
- Binary (Qlik BYTES/BLOB, DataWorks BYTES, Datastream bytes) is lower-case hex: a JSON string in
  jsonl, the field in CSV. Hex because `deltaport export` writes binary columns as lower-case hex
  text into Prostore (resources/lake/stream_export.py): a table reads the same here and there.
- Dates, times and timestamps are ISO 8601 with microseconds (timestamps UTC, marked Z); booleans
  true/false; null is JSON null, an empty CSV field (as an empty string is: CSV cannot tell them apart).
- A value of any other type is a `DeltaportError` naming its column, never a Python repr.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Sequence
from decimal import Decimal

from resources.errors import DeltaportError


def iso(value):
    """Dates, times and timestamps as ISO 8601 text; any other value as it is."""
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="microseconds") + "Z"
    if isinstance(value, dt.time):
        return value.isoformat(timespec="microseconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def decimal_text(value: Decimal) -> str:
    """The decimal's digits in fixed-point notation (Decimal('0E-10') -> 0.0000000000)."""
    return format(value, "f")


def _as_text(column: str, value, form: str) -> str:
    """The text of a decimal, binary, date, time or timestamp value, alike in both forms."""
    if isinstance(value, Decimal) and value.is_finite():
        return decimal_text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (dt.date, dt.time)):
        return iso(value)
    raise DeltaportError(f"column {column!r}: no {form} form for the {type(value).__name__} value {value!r}")


def json_value(column: str, value) -> str:
    """One value as the JSON text of a jsonl line."""
    # The common values without the encoder (as json.dumps writes them): a read prints every
    # value of every row, and json.dumps per value was most of a large read's time.
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        return int.__repr__(value)
    if isinstance(value, (bool, int, float, str)):
        return json.dumps(value, ensure_ascii=False)
    text = _as_text(column, value, "JSON")
    return text if isinstance(value, Decimal) else json.dumps(text)  # a decimal: a number, unquoted


def jsonl_line(columns: Sequence[str], row) -> str:
    """One row as a JSON object on one line (the same spacing as `json.dumps`), with its newline."""
    return "{" + ", ".join(f"{_json_key(c)}: {json_value(c, row[c])}" for c in columns) + "}\n"


@functools.lru_cache(maxsize=4096)
def _json_key(column: str) -> str:
    """A column name as a JSON key: encoded once per column, not once per row."""
    return json.dumps(column, ensure_ascii=False)


def csv_value(column: str, value):
    """One value as a CSV field (the csv module quotes what needs it)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return value
    return _as_text(column, value, "CSV")
