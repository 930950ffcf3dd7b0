"""`verify_committed`: an increment is claimed landed only when each table's commit added exactly
the rows its write sent (pure logic; the integration tests land real commits through it)."""

import pytest

from resources.lake.prostore import IncrementNotLandedError, verify_committed

A, B = "lake.dm_increment.a", "lake.dm_increment.b"


def test_every_table_committed_as_written_passes():
    verify_committed("dm", [3, 4], {A: 120, B: 0}, {A: 120, B: 0})
    verify_committed("dm", [5], {B: 0}, {})  # no rows, and no commit summary to read: nothing lost


def test_a_commit_holding_other_rows_names_table_deltas_and_counts():
    with pytest.raises(IncrementNotLandedError,
                       match=r"'dm' delta\(s\) 3, 4: .*lake.dm_increment.a: 120 rows written, 119 committed\); "
                             r"the manifest was not written"):
        verify_committed("dm", [3, 4], {A: 120, B: 7}, {A: 119, B: 7})


def test_a_commit_not_found_is_not_landed():
    with pytest.raises(IncrementNotLandedError, match=r"lake.dm_increment.b: 7 rows written, no commit found"):
        verify_committed("dm", [3], {A: 0, B: 7}, {A: 0})
