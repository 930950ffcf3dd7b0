"""A user mart's read (resources/lake/mart_read.py) on hand-made answers: which deltas have landed,
which one a read takes, and the order it prints."""

import pyarrow as pa
import pytest

from resources.lake.mart_read import MartReadError, landed_deltas, mart_rows, pick_delta


def test_landed_deltas_are_the_commits_ranges_and_the_rows_delta_numbers():
    assert landed_deltas(["0-1", None, "3,5-6"], [2, 2, None]) == [0, 1, 2, 3, 5, 6]
    assert landed_deltas([], []) == []


def test_a_read_takes_the_last_landed_delta_or_names_why_it_cannot():
    assert pick_delta("m_marts.a", [0, 1, 2, 5], None) == 5
    assert pick_delta("m_marts.a", [0, 1, 2, 5], 1) == 1
    with pytest.raises(MartReadError, match=r"delta 3 has not landed in the mart \(landed: 0-2, 5\)"):
        pick_delta("m_marts.a", [0, 1, 2, 5], 3)
    with pytest.raises(MartReadError, match="no delta has landed in the mart yet"):
        pick_delta("m_marts.a", [], None)


def test_rows_drop_the_delta_column_and_sort_by_their_values():
    names, rows = mart_rows(pa.table({"store": [10, 2, None], "delta_num": [4, 4, 4], "units": [1, 2, 3]}))
    assert names == ["store", "units"]
    assert rows.to_pylist() == [{"store": None, "units": 3}, {"store": 10, "units": 1}, {"store": 2, "units": 2}]
