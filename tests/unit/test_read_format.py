"""`deltaport read` output: ISO 8601 with microseconds (timestamps UTC, Z), numbers as numbers, null."""

from __future__ import annotations

import datetime as dt
import json

from platform_assets.cli.read_cmd import _csv, iso


def test_iso_values():
    assert iso(dt.datetime(1970, 1, 1, 13, 10, 30)) == "1970-01-01T13:10:30.000000Z"
    assert iso(dt.time(13, 10, 30, 5)) == "13:10:30.000005"
    assert iso(dt.date(1970, 1, 11)) == "1970-01-11"
    assert iso(3.141526) == 3.141526 and iso(None) is None and iso(True) is True
    row = {"n": 1, "f": 2.5, "s": "Покупка", "t": iso(dt.datetime(2024, 2, 28, 8, 2, 40, 463000)), "x": None}
    assert json.loads(json.dumps(row, ensure_ascii=False)) == {
        "n": 1, "f": 2.5, "s": "Покупка", "t": "2024-02-28T08:02:40.463000Z", "x": None}


def test_csv_values():
    assert _csv(None) == "" and _csv(True) == "true" and _csv(False) == "false"
    assert _csv(dt.date(2024, 1, 2)) == "2024-01-02" and _csv(7) == 7
