"""The fault suite's quick cases (bench/faults.py; `make faults` runs them at full size).

Bad input at scale, smaller: each of the five wire formats gets seeded corruptions mixed into
its emulated story on the real broker, read by the sensor's own code in bounded ticks. Every
message read is accounted for, nothing crashes, every corruption that cannot be valid is
quarantined with its coordinates, and no good message is.

Two kills of `make faults`' eight: `deltaport sync` SIGKILLed between a snapshot MERGE's commit
and its delta tag, in a range run (before the fix, the interrupted delta had no tag), and while
table maintenance compacts a snapshot table after the range; the next sync lands every delta
equal to the truth, nothing twice, every delta readable by its tag.
"""

from __future__ import annotations

import pytest

from bench.fault_kills import KILLS, publish_story, run_kill_case
from bench.faults import FORMATS, run_corruption_case

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fmt", FORMATS)
def test_corruptions_are_quarantined_and_the_good_messages_kept(kafka_bootstrap, tmp_path, fmt):
    row = run_corruption_case(kafka_bootstrap, fmt, corruptions=120, seed=3, work=tmp_path, max_messages=100)
    assert row.crashed is None, row.crashed
    assert row.read == row.produced and row.ticks > 2, row  # several bounded ticks, every message read
    assert row.must_fail > 0 and row.must_fail_quarantined == row.must_fail, row
    assert row.good_quarantined == 0 and row.without_location == 0, row
    assert row.survived


@pytest.mark.parametrize("case", ["kill-snapshot-commit-before-tag", "kill-inside-compaction"])
def test_a_killed_sync_converges_on_the_next(spark_remote, kafka_bootstrap, tmp_path, case):
    row = run_kill_case(kafka_bootstrap, spark_remote, publish_story(kafka_bootstrap, seed=5, deltas=2), case,
                        KILLS[case], tmp_path)
    assert row.killed and row.recovered, row.problems
    assert (row.rows_lost, row.rows_duplicated, row.increment_rows_extra, row.increment_rows_missing) == (0, 0, 0, 0), row
    assert row.deltas_applied_twice == 0 and row.untagged_deltas == 0 and not row.problems, row
    assert row.survived
