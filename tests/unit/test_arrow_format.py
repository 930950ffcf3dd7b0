"""`deltaport read`'s text made from Arrow columns (platform_assets/cli/arrow_format.py) is byte for
byte the text the value-by-value formatter (platform_assets/cli/read_format.py, through `csv.writer`
for CSV) makes of the same rows, as the engines gave them before (Arrow values as Python values,
zoned timestamps as naive UTC): every lake type, its edge values, nulls, every ASCII character in a
string, batch boundaries."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pyarrow as pa
import pytest

from platform_assets.cli import arrow_format
from platform_assets.cli.read_format import csv_value, jsonl_line
from resources.errors import DeltaportError

AT = dt.datetime(2024, 2, 29, 23, 59, 58, 123456)
TEXTS = ["", "plain", 'Zürich, 東京 "q" \'s\'\nline', "back\\slash", "tab\tcr\rlf\n", "\u2028 😀", " lead",
         "a,b", 'x"', *(chr(c) for c in range(128))]
FLOATS = [0.1, 1e16 + 2, 1e-300, -0.0, 1.0, 5e-324, 1e300, 123456789.0, float("inf"), float("-inf"), float("nan"),
          # where Arrow's notation and Python's part (`_float_text`): around 1e-4 and 1e16, whole numbers
          1e-4, -9.99e-5, 1e-5, 1e-7, 1e-9, 9.99e-10, 1e-10, 1e15, 2.0**53, 9999999999999998.0, 1e16, 1e100,
          0.30000000000000004, 0.0]
DECIMALS = [Decimal("0E-10"), Decimal("12.5000000000"), Decimal("-0.0500000000"), Decimal("1E-7"),
            Decimal("-5.0E-8"), Decimal("1234567890123456789012345678.0123456789")]


def _column(values, kind, n):
    return pa.array([values[i % len(values)] if i % 7 != 3 else None for i in range(n)], kind)


def _every_type(n: int) -> pa.Table:
    """`n` rows of every lake type, cycling through each type's edge values (every 7th a null)."""
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "big": _column([0, -(2**63), 2**63 - 1, 7], pa.int64(), n),
        "i32": _column([-1, 2**31 - 1, -(2**31)], pa.int32(), n),
        "flag": _column([True, False], pa.bool_(), n),
        "f": _column([1.1, -0.0, 3.4e38, float("inf")], pa.float32(), n),
        "d": _column(FLOATS, pa.float64(), n),
        "text": _column(TEXTS, pa.string(), n),
        "dec": _column(DECIMALS, pa.decimal128(38, 10), n),
        "money": _column([Decimal("99999999.99"), Decimal("0.10"), Decimal("-0.05")], pa.decimal128(10, 2), n),
        "whole": _column([Decimal("-1000"), Decimal("0")], pa.decimal128(10, 0), n),
        "raw": _column([b"", b"\x00\x01\xfe\xff", bytes(range(256))], pa.binary(), n),
        "day": _column([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), dt.date(999, 2, 3)],
                       pa.date32(), n),
        "tod": _column([dt.time(0, 0), dt.time(13, 10, 30, 5), dt.time(23, 59, 59, 999999)], pa.time64("us"), n),
        "at": _column([AT, dt.datetime(1, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
                       dt.datetime(9999, 12, 31, 23, 59, 59, 999999)], pa.timestamp("us"), n),
        "at_utc": _column([AT, dt.datetime(1970, 1, 1)], pa.timestamp("us", tz="UTC"), n),
        "at_msk": _column([AT, dt.datetime(1970, 1, 1, 5)], pa.timestamp("us", tz="+03:00"), n),
        "at_ms": _column([AT.replace(microsecond=123000), dt.datetime(1969, 12, 31, 23, 59, 59, 1000)],
                         pa.timestamp("ms"), n),
        "label": _column(["a,b", 'q"', "plain"], pa.string(), n).dictionary_encode(),
        "nothing": pa.nulls(n),
        "a,b \"q\" ünï": _column(["x"], pa.string(), n),
    })


def _python_rows(table: pa.Table) -> list[dict]:
    """The rows as the engines gave the value-by-value formatter: Python values, zoned timestamps
    as naive UTC."""
    rows = table.to_pylist()
    for row in rows:
        for name, value in row.items():
            if isinstance(value, dt.datetime) and value.tzinfo is not None:
                row[name] = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return rows


def _old_text(table: pa.Table, fmt: str) -> bytes:
    """What `deltaport read` wrote before the Arrow formatter (read_cmd._write), as UTF-8."""
    out, columns = io.StringIO(newline=""), table.column_names
    rows = _python_rows(table)
    if fmt == "jsonl":
        for row in rows:
            out.write(jsonl_line(columns, row))
    else:
        writer = csv.writer(out)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([csv_value(c, row[c]) for c in columns])
    return out.getvalue().encode("utf-8")


def _new_text(table: pa.Table, fmt: str) -> bytes:
    out = io.BytesIO()
    (arrow_format.write_jsonl if fmt == "jsonl" else arrow_format.write_csv)(table, out)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_every_type_reads_as_the_value_by_value_formatter_writes_it(fmt, monkeypatch):
    monkeypatch.setattr(arrow_format, "BATCH_ROWS", 37)  # several batches, each a slice of the table
    table = _every_type(len(TEXTS) * 3)
    new, old = _new_text(table, fmt), _old_text(table, fmt)
    assert new.splitlines() == old.splitlines()  # a readable failure first: the line that differs
    assert new == old


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_one_column_no_rows_and_a_table_in_chunks(fmt):
    one = pa.table({"v": pa.array(["", None, "x", ","], pa.string())})  # csv: a lone empty field is ""
    nums = pa.table({"n": pa.nulls(3)})
    empty = _every_type(0)
    chunked = pa.concat_tables([_every_type(5).slice(2), _every_type(9).slice(1, 4)])
    for table in (one, nums, empty, chunked):
        assert _new_text(table, fmt) == _old_text(table, fmt), table


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_type_with_no_documented_form_is_an_error_naming_its_column(fmt):
    table = pa.table({"id": [1], "odd": pa.array([[1, 2]], pa.list_(pa.int64()))})
    with pytest.raises(DeltaportError, match="column 'odd'"):
        _new_text(table, fmt)


def test_floats_of_every_magnitude_read_as_pythons_repr():
    import numpy as np

    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**64, 100_000, dtype=np.uint64).view(np.float64)  # every exponent, NaNs, signs
    scaled = rng.random(100_000) * 10.0 ** rng.integers(-12, 25, 100_000)
    values = np.concatenate([bits, scaled, np.round(scaled, 2), np.float32(scaled).astype(np.float64)])
    for json_form in (True, False):
        got = arrow_format._float_text(pa.array(values), json_form=json_form).to_pylist()
        want = [repr(v) for v in values.tolist()]
        if json_form:
            want = [{"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(w, w) for w in want]
        assert got == want
