"""The pure parts of Prostore's FOR SYSTEM_TIME forms: range flags, time to delta, the clauses."""

import datetime as dt

import pytest

from resources.lake.history_forms import AsOfDelta, FinishedIn, StartedIn, delta_at, history_where, parse_range


def test_a_range_flag_takes_two_deltas_or_one():
    assert parse_range("3,7", flag="--started-in") == (3, 7)
    assert parse_range(" 4 ", flag="--started-in") == (4, 4)
    for bad in ("7,3", "-1,2", "a,b", "1,2,3", "", "1" * 30):
        with pytest.raises(ValueError, match="--finished-in"):
            parse_range(bad, flag="--finished-in")


def test_a_time_picks_the_last_delta_closed_at_or_before_it():
    t = {0: dt.datetime(2026, 1, 1, 12), 1: dt.datetime(2026, 1, 1, 13), 2: dt.datetime(2026, 1, 2)}
    assert delta_at(t, dt.datetime(2026, 1, 1, 13)) == 1  # inclusive, as GET_DELTA_BY_DATETIME
    assert delta_at(t, dt.datetime(2026, 1, 1, 12, 59)) == 0
    assert delta_at(t, dt.datetime(2030, 1, 1)) == 2
    assert delta_at(t, dt.datetime(2025, 1, 1)) is None
    assert delta_at({}, dt.datetime(2025, 1, 1)) is None


def test_the_clauses_are_prostores_rewrites():
    assert AsOfDelta(5).where() == "(sys_from IS NULL OR sys_from <= 5) AND (sys_to IS NULL OR sys_to >= 5)"
    assert StartedIn(2, 4).where() == "sys_from >= 2 AND sys_from <= 4"
    assert FinishedIn(2, 4).where() == "sys_to >= 1 AND sys_to <= 3 AND sys_op = 1"
    assert not FinishedIn(2, 4).needs_current()
    # the history's partitions (closing delta = sys_to + 1) that can hold an answer
    assert history_where(AsOfDelta(5)).startswith("delta_num >= 6 AND ")
    assert history_where(FinishedIn(2, 4)).startswith("delta_num >= 2 AND ")
    assert history_where(StartedIn(2, 4)).startswith("delta_num >= 3 AND ")
