"""The order `deltaport read` prints rows in, now sorted in Arrow (resources/lake/arrow_order.py), is
the order the value-by-value read sorted Python rows in: a datamart's by primary key (Python's
`sorted` on `(value is not None, value)`), a change stream's by the `repr` of each value; and the
canonical columns (TIME from microseconds, zoned timestamps as naive UTC, missing columns null)."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pyarrow as pa

from resources.lake.arrow_order import by_key, by_repr, canonical

WORDS = ["", "a", "ab", "ab!", "it's", 'say "x"', "Zürich", "zebra", "東京", "😀", "A", "a\nb"]


def _rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)

    def maybe(value):
        return None if rng.random() < 0.15 else value

    return [{"k": maybe(rng.choice(WORDS)), "n": maybe(rng.randint(-20, 20)), "f": maybe(rng.choice([0.5, -1.0, 10.0])),
             "d": maybe(Decimal(rng.randint(-999, 999)).scaleb(-2)), "b": maybe(bytes([rng.randrange(256)])),
             "t": maybe(dt.datetime(2024, 1, 1) + dt.timedelta(seconds=rng.randint(-10**6, 10**6))),
             "day": maybe(dt.date(1990, 1, 1) + dt.timedelta(days=rng.randint(0, 20000))), "i": i}
            for i in range(n)]


TYPES = {"k": pa.string(), "n": pa.int64(), "f": pa.float64(), "d": pa.decimal128(6, 2), "b": pa.binary(),
         "t": pa.timestamp("us"), "day": pa.date32(), "i": pa.int64()}


def _table(rows):
    return pa.table({c: pa.array([r[c] for r in rows], t) for c, t in TYPES.items()})


def test_a_datamart_order_is_pythons_sort_by_key_nulls_first():
    rows = _rows(400, 1)
    for order in (["k", "n", "i"], ["n", "k", "i"], ["d", "i"], ["b", "t", "i"], ["day", "f", "i"]):
        want = sorted(rows, key=lambda r: tuple((r[k] is not None, r[k]) for k in order))
        assert by_key(_table(rows), order).to_pylist() == want, order


def test_a_change_stream_order_is_by_the_repr_of_each_value():
    rows = _rows(400, 2)
    order = list(TYPES)
    want = sorted(rows, key=lambda row: [(row[c] is not None, repr(row[c])) for c in order])
    assert by_repr(_table(rows), order).to_pylist() == want


def test_canonical_columns():
    arrow = pa.table({"ID": [1, 2], "Tod": pa.array([5, None], pa.int64()),
                      "at": pa.array([dt.datetime(2024, 1, 1, 3, tzinfo=dt.timezone(dt.timedelta(hours=3))), None],
                                    pa.timestamp("us", tz="+03:00"))})
    out = canonical(arrow, ["id", "tod", "at", "gone"], times=["tod"])
    assert out.column_names == ["id", "tod", "at", "gone"]
    assert out.to_pylist() == [{"id": 1, "tod": dt.time(0, 0, 0, 5), "at": dt.datetime(2024, 1, 1, 0), "gone": None},
                               {"id": 2, "tod": None, "at": None, "gone": None}]
