"""`deltaport read` output (platform_assets/cli/read_format.py): ISO 8601 with microseconds
(timestamps UTC, Z), numbers as numbers, decimals with their exact digits, binary as lower-case
hex in both formats, null; anything else a typed error naming the column."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from platform_assets.cli.read_format import csv_value, iso, json_value, jsonl_line
from resources.errors import DeltaportError


def test_iso_values():
    assert iso(dt.datetime(1970, 1, 1, 13, 10, 30)) == "1970-01-01T13:10:30.000000Z"
    assert iso(dt.time(13, 10, 30, 5)) == "13:10:30.000005"
    assert iso(dt.date(1970, 1, 11)) == "1970-01-11"
    assert iso(3.141526) == 3.141526 and iso(None) is None and iso(True) is True


def test_jsonl_lines():
    row = {"n": 1, "f": 2.5, "s": "Покупка", "t": dt.datetime(2024, 2, 28, 8, 2, 40, 463000), "x": None,
           "ok": False, "dec": Decimal("12.50"), "zero": Decimal("0E-10"), "raw": b"\x00\x01\xfe\xff",
           "buf": bytearray(b"\xab"), "day": dt.date(2024, 1, 2), "tod": dt.time(0, 0, 0, 1)}
    line = jsonl_line(list(row), row)
    assert line.endswith("}\n") and line.count("\n") == 1
    assert '"dec": 12.50, "zero": 0.0000000000, "raw": "0001feff", "buf": "ab"' in line
    assert json.loads(line) == {
        "n": 1, "f": 2.5, "s": "Покупка", "t": "2024-02-28T08:02:40.463000Z", "x": None, "ok": False, "dec": 12.5,
        "zero": 0.0, "raw": "0001feff", "buf": "ab", "day": "2024-01-02", "tod": "00:00:00.000001"}
    exact = json.loads(line, parse_float=Decimal)
    assert str(exact["dec"]) == "12.50" and str(exact["zero"]) == "0E-10"
    assert json_value("d", Decimal("1234567890123456789012345678.0123456789")) == (
        "1234567890123456789012345678.0123456789")
    assert json_value("d", Decimal("-1E+3")) == "-1000"  # never an exponent


def test_csv_values():
    assert csv_value("c", None) == "" and csv_value("c", True) == "true" and csv_value("c", False) == "false"
    assert csv_value("c", dt.date(2024, 1, 2)) == "2024-01-02" and csv_value("c", 7) == 7
    assert csv_value("c", Decimal("12.50")) == "12.50" and csv_value("c", Decimal("0E-10")) == "0.0000000000"
    assert csv_value("c", b"\x00\x01") == "0001" and csv_value("c", bytearray(b"\xff")) == "ff"


@pytest.mark.parametrize("value", [Decimal("NaN"), [1, 2], {"a": 1}, object()])
def test_a_value_with_no_documented_form_is_an_error_naming_its_column(value):
    with pytest.raises(DeltaportError, match="column 'odd'"):
        json_value("odd", value)
    with pytest.raises(DeltaportError, match="column 'odd'"):
        csv_value("odd", value)


def test_a_jsonl_line_encodes_only_its_strings_and_floats_each_row(monkeypatch):
    # 100k rows went through json.dumps eight times each (every key, every value): 60% of a warm
    # `deltaport read` of 100k rows. Keys are encoded once per column; ints, bools and nulls
    # need no encoder. Counted, not timed.
    import platform_assets.cli.read_format as fmt

    calls = []
    real = json.dumps
    monkeypatch.setattr(fmt.json, "dumps", lambda *a, **k: calls.append(a) or real(*a, **k))
    row = {"id": 7, "name": "Покупка", "b": -3, "ok": True, "x": None, "c": 0.5}
    lines = [jsonl_line(list(row), row) for _ in range(3)]
    assert lines[0] == real(row, ensure_ascii=False) + "\n" and len(set(lines)) == 1
    assert len(calls) <= len(row) + 2 * 3, calls  # the keys once, then one string and one float per row
