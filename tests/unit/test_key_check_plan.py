"""When a delta run's key check runs and which deltas' keys it looks at (resources/lake/key_check.py)."""

import pytest

from resources.lake.key_check import KeyCheckPlan, key_check_deltas


@pytest.mark.parametrize("run, every, expected", [
    ([0], 10, [0]),                      # the first delta is checked: the table is new
    ([3], 10, None),                     # between multiples: no check
    ([10], 10, list(range(0, 11))),      # a multiple: every delta since the previous one
    ([20], 10, list(range(10, 21))),
    ([7, 8, 9, 10, 11], 10, list(range(0, 12))),  # a range crossing a multiple: back to the previous one
    ([11, 12], 10, None),
    ([5], 1, [4, 5]),                    # every run is checked
    ([19, 20, 21, 30, 31], 10, list(range(10, 32))),  # two multiples: from the lowest one's previous
])
def test_key_check_deltas(run, every, expected):
    assert key_check_deltas(run, every) == expected


def test_every_delta_is_covered_by_some_check_whatever_the_runs():
    """Runs of any length, one after the other, each checking what key_check_deltas names: the
    checked deltas cover every delta up to the last multiple reached."""
    for every in (1, 3, 10):
        for lengths in ([1] * 40, [3, 7, 1, 13, 2, 9, 5], [25, 1, 1, 13]):
            checked, first = set(), 0
            for n in lengths:
                checked |= set(key_check_deltas(list(range(first, first + n)), every) or [])
                first += n
            last_multiple = (first - 1) // every * every
            assert set(range(0, last_multiple + 1)) <= checked, (every, lengths)


def test_the_plan_of_a_run():
    assert KeyCheckPlan.for_run([3], every=10) == KeyCheckPlan(None, False, 10)
    assert KeyCheckPlan.for_run([3], every=10, asked=True) == KeyCheckPlan((3,), False, 10)
    assert KeyCheckPlan.for_run([10], every=10) == KeyCheckPlan(tuple(range(0, 11)), False, 20)
    assert KeyCheckPlan.for_run([50], every=10, every_key=True) == KeyCheckPlan(None, True, 60)
