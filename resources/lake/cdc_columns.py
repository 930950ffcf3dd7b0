"""Change-stream changes as lake columns: each format's order key as sortable text, the column
types a table's changes need (declared by the source, else inferred from the values, widened
as they grow), and the changes as a Spark DataFrame in those columns. Pure of the lake's tables:
`resources/lake/cdc.py` lands and applies what this module shapes (its docstring says how).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from decimal import Context, Decimal
from typing import Any

from resources.codecs.cdc import BEFORE_IMAGE, DELETE, UPSERT, Change
from resources.errors import DeltaportError
from resources.formats import STREAM_FORMATS, stream_format


class CdcTypeError(DeltaportError):
    """A value does not fit its column's Spark type, or a column's values mix incompatible types."""


# --------------------------------------------------------------------------------------------
# Order keys as sortable text

# Tags of the encoding; only their relative order matters (see `order_key_text`).
_END = ")"  # end of a (nested) tuple: below every element tag, so a prefix tuple sorts first
_NONE, _NEG, _POS, _STR, _TUPLE, _BYTES = "A", "M", "P", "S", "T", "X"
_STR_END, _STR_ESC = "!", '"'  # in a string: end mark < escape lead < every unescaped character
_NEG_DIGITS = str.maketrans("0123456789", "9876543210")


def _encode_int(n: int) -> str:
    digits = str(abs(n))
    length = str(len(digits))
    if len(length) > 9:  # an integer of a billion digits or more
        raise CdcTypeError("order key integer too large to encode")
    body = str(len(length)) + length + digits
    # Negative: the same layout with every digit complemented, so a larger magnitude sorts first.
    return _POS + body if n >= 0 else _NEG + body.translate(_NEG_DIGITS)


def _encode_str(s: str) -> str:
    out = [_STR]
    for ch in s:
        if ch <= "#":  # end mark, escape lead and everything below them
            out.append(_STR_ESC + chr(0x40 + ord(ch)))
        else:
            out.append(ch)
    out.append(_STR_END)
    return "".join(out)


def _encode(value: Any, out: list[str]) -> None:
    if value is None:
        out.append(_NONE)
    elif isinstance(value, int):  # bool too: Python compares True == 1
        out.append(_encode_int(int(value)))
    elif isinstance(value, str):
        out.append(_encode_str(value))
    elif isinstance(value, tuple):
        out.append(_TUPLE)
        for v in value:
            _encode(v, out)
        out.append(_END)
    elif isinstance(value, (bytes, bytearray)):
        out.append(_BYTES + bytes(value).hex() + _STR_END)
    else:
        raise CdcTypeError(f"order key element {value!r} ({type(value).__name__}) is not "
                           "None, int, str, bytes or tuple")


def order_key_text(order_key: tuple) -> str:
    """A string that sorts (by code point, which is UTF-8 byte order, Spark's string order)
    exactly as the order key tuples compare in Python.

    Elements: ints of any size (bools as 0/1), str, bytes, None and nested tuples. Where Python
    cannot compare two elements (int vs str, None vs anything), the text still gives a fixed,
    total order: None < negative int < non-negative int < str < tuple < bytes. Equal tuples
    (also 1 == True) give equal text. The encoding is prefix-free per element, so comparing
    the texts compares element by element, and a tuple that is a prefix of another sorts first.
    - int: "P" + digit count of the length + length + decimal digits; negatives "M" + the same
      with every digit complemented (9 - d), so -10 < -9 < 0 < 9 < 10;
    - str: "S" + the characters, those <= '#' escaped as '"' + chr(0x40 + code), then "!";
    - bytes: "X" + lowercase hex + "!"; tuple: "T" + elements + ")"; None: "A".
    The top-level tuple is its elements, without "T" and ")": (2, "a") -> 'P112Sa!'.
    """
    if not isinstance(order_key, tuple):
        raise CdcTypeError(f"an order key is a tuple, got {type(order_key).__name__}")
    out: list[str] = []
    for v in order_key:
        _encode(v, out)
    return "".join(out)


# --------------------------------------------------------------------------------------------
# Changes as a DataFrame

META_COLUMNS = ("_op", "_order", "_event_id", "_captured", "_event_time_us", "_backfill", "_source_op")
# The snapshot's own columns: the order rules' and each current version's (resources/lake/stream_history.py).
SNAPSHOT_COLUMNS = ("_order", "_tombstone", "_event_time_us", "sys_from", "sys_from_date")
KEYS_PROPERTY = "deltaport.keys"  # a snapshot commit's key columns, as JSON
_INCREMENT_EXTRA = ("delta_num", "delta_date")
_DECIMAL_TYPE = re.compile(r"(?i)^\s*(?:numeric|decimal|number)\s*\(\s*(\d+)\s*,\s*(-?\d+)\s*\)\s*$")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
# Room for 38 digits (Python's default 28 raised InvalidOperation); more gives NaN, which fits no column.
_QUANTIZE = Context(prec=80, traps=[])


def _meta_fields():
    from pyspark.sql import types as T

    return [T.StructField("_op", T.StringType(), True), T.StructField("_order", T.StringType(), True),
            T.StructField("_event_id", T.StringType(), True),
            T.StructField("_captured", T.ArrayType(T.StringType(), True), True),
            T.StructField("_event_time_us", T.LongType(), True), T.StructField("_backfill", T.BooleanType(), True),
            T.StructField("_source_op", T.StringType(), True)]


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if _LONG_MIN <= value <= _LONG_MAX else "bigint"
    for kind, types in (("float", float), ("decimal", Decimal), ("str", str), ("bytes", (bytes, bytearray)),
                        ("datetime", dt.datetime), ("date", dt.date), ("time", dt.time)):
        if isinstance(value, types):
            return kind
    raise CdcTypeError(f"no Spark type for a {type(value).__name__} value ({value!r})")


def _decimal_shape(d: Decimal) -> tuple[int, int]:
    """(digits before the point, at least 1; digits after) of a finite Decimal."""
    if not d.is_finite():
        raise CdcTypeError(f"{d} has no Spark decimal value")
    _, digits, exponent = d.as_tuple()
    return max(1, len(digits) + exponent), max(0, -exponent)


# Source type names (Change.column_types) -> Spark type names: each format's `column_types`
# (resources/formats/); the values decide when a name is missing or unknown, or when a value
# does not fit (Qlik JSON keeps BYTES as text, for one).
def _declared_type(source: str, type_name: str | None):
    from pyspark.sql import types as T

    if not type_name:
        return None
    m = _DECIMAL_TYPE.match(type_name)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        return T.DecimalType(precision, scale) if 0 <= scale <= precision <= 38 else None
    known = stream_format(source).column_types if source in STREAM_FORMATS else {}
    name = known.get(type_name.split("(", 1)[0].strip())
    if name is None:
        return None
    return {"bigint": T.LongType(), "double": T.DoubleType(), "boolean": T.BooleanType(), "date": T.DateType(),
            "timestamp_ntz": T.TimestampNTZType(), "string": T.StringType(), "binary": T.BinaryType()}[name]


def _fits(values: list, dtype) -> bool:
    try:
        for v in values:
            _spark_value(v, dtype, "")
    except CdcTypeError:
        return False
    return True


def _from_values(name: str, values: list):
    from pyspark.sql import types as T

    seen = {_kind(v) for v in values}
    if not seen:
        return T.StringType()
    if len(seen) == 1 and seen not in ({"decimal"}, {"bigint"}):
        return {"bool": T.BooleanType(), "int": T.LongType(), "float": T.DoubleType(), "str": T.StringType(),
                "bytes": T.BinaryType(), "datetime": T.TimestampNTZType(), "date": T.DateType(),
                "time": T.LongType()}[next(iter(seen))]
    if seen <= {"int", "float"}:
        return T.DoubleType()
    if seen <= {"int", "bigint", "decimal"}:
        whole = scale = 0
        for v in values:
            w, sc = _decimal_shape(Decimal(v))
            whole, scale = max(whole, w), max(scale, sc)
        if whole + scale > 38:
            raise CdcTypeError(f"column {name!r}: numbers of {whole} integer and {scale} fraction digits do not "
                               "fit a Spark decimal (38 digits)")
        return T.DecimalType(whole + scale, scale)
    raise CdcTypeError(f"column {name!r} mixes values of types {sorted(seen)}")


def infer_columns(changes: Iterable[Change], known: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """The data columns of one table's changes as [(name, Spark DataType)]: `known` columns
    first (e.g. `increment_columns` of the lake table), then new ones in order of first appearance.

    A column's type is the first of these that every value of the column fits: its `known`
    type (so a delta whose values are all NULL, or narrower, keeps the lake's type), the type
    its source declares (`Change.column_types`, e.g. Qlik NUMERIC(12,2), DataWorks LONG, Avro
    long), the type its values give (module docstring)."""
    values: dict[str, list] = {n: [] for n, _ in known}
    declared: dict[str, Any] = {}
    for ch in changes:
        for name, value in ch.values.items():
            values.setdefault(name, [])
            if value is not None:
                values[name].append(value)
            if declared.get(name) is None:
                declared[name] = _declared_type(ch.source, ch.column_types.get(name))
    have = dict(known)
    out = []
    for name, vals in values.items():
        dtype = next((t for t in (have.get(name), declared.get(name)) if t is not None and _fits(vals, t)), None)
        out.append((name, dtype if dtype is not None else _from_values(name, vals)))
    return out


def check_landable(changes: Sequence[Change], known: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """The columns `infer_columns` gives one table's changes, after checking that every value
    fits its column as `changes_frame` would; else `CdcTypeError` naming the column. No Spark."""
    columns = infer_columns(changes, known)
    types = dict(columns)
    for ch in changes:
        for name, value in ch.values.items():
            _spark_value(value, types[name], name)
    return columns



def _spark_value(value: Any, dtype, column: str) -> Any:
    """`value` as pyspark's createDataFrame wants it for `dtype` (checked, never silently lost)."""
    from pyspark.sql import types as T

    if value is None:
        return None
    try:
        if isinstance(dtype, T.BooleanType):
            if isinstance(value, bool):
                return value
        elif isinstance(dtype, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
            if isinstance(value, dt.time):
                return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
            if isinstance(value, int) and not isinstance(value, bool) and _LONG_MIN <= value <= _LONG_MAX:
                return value
        elif isinstance(dtype, (T.DoubleType, T.FloatType)):
            if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
                return float(value)
        elif isinstance(dtype, T.DecimalType):
            if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
                d = Decimal(value)
                q = d.quantize(Decimal(1).scaleb(-dtype.scale), context=_QUANTIZE)
                if q != d or len(q.as_tuple().digits) > dtype.precision:
                    raise CdcTypeError(f"{value} does not fit {dtype.simpleString()}")
                return q
        elif isinstance(dtype, T.StringType):
            if isinstance(value, str):
                return value
        elif isinstance(dtype, T.BinaryType):
            if isinstance(value, (bytes, bytearray)):
                return bytearray(value)
        elif isinstance(dtype, (T.TimestampNTZType, T.TimestampType)):
            if isinstance(value, dt.datetime):
                return value.astimezone(dt.timezone.utc).replace(tzinfo=None) if value.tzinfo else value
        elif isinstance(dtype, T.DateType):
            if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
                return value
    except CdcTypeError as exc:
        raise CdcTypeError(f"column {column!r}: {exc}") from None
    raise CdcTypeError(f"column {column!r}: {type(value).__name__} value {value!r} does not fit "
                       f"{dtype.simpleString()}")


def changes_frame(spark, changes: Sequence[Change], table_columns: Sequence[tuple[str, Any]]):
    """One table's changes (of one delta) as a DataFrame: the data columns of `table_columns`
    ([(name, Spark DataType)], e.g. from `infer_columns`) plus `_op` (upsert | delete |
    before_image), `_order` (`order_key_text`), `_event_id` (the order text when the change
    has none), `_captured` (sorted column names, NULL = every column: a column absent from
    such a change's values is NULL in the row), `_event_time_us`, `_backfill`, `_source_op`.

    Changes of more than one table, a column not in `table_columns`, or a value that does not
    fit its column's type raise `CdcTypeError` (nothing is guessed)."""
    from pyspark.sql import types as T

    tables = {(c.namespace, c.table) for c in changes}
    if len(tables) > 1:
        raise CdcTypeError(f"changes of several tables in one frame: {sorted(map(str, tables))}")
    columns = [(n, t) for n, t in table_columns]
    names = {n for n, _ in columns}
    reserved = [n for n in names if n in META_COLUMNS or n in SNAPSHOT_COLUMNS or n in _INCREMENT_EXTRA
                or n.startswith("__dp_")]
    if reserved:
        raise CdcTypeError(f"data column(s) {sorted(reserved)} clash with the lake's own columns")
    rows = []
    for ch in changes:
        if ch.operation not in (UPSERT, DELETE, BEFORE_IMAGE):
            raise CdcTypeError(f"unknown change operation {ch.operation!r}")
        unknown = sorted((set(ch.values) | set(ch.captured or ())) - names)
        if unknown:
            raise CdcTypeError(f"{ch.table}: column(s) {unknown} are not among the table columns "
                               f"{[n for n, _ in columns]}")
        order = order_key_text(ch.order_key)
        data = tuple(_spark_value(ch.values.get(n), t, n) for n, t in columns)
        captured = None if ch.captured is None else sorted(ch.captured)
        rows.append((*data, ch.operation, order, ch.event_id or "order:" + order, captured,
                     ch.event_time_us, bool(ch.is_backfill), ch.source_op))
    schema = T.StructType([T.StructField(n, t, True) for n, t in columns] + _meta_fields())
    return spark.createDataFrame(rows, schema)
